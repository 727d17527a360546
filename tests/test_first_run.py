"""A missing or old TensorFlow is named at import, with how to install it."""

import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULE = ROOT / "gaviz" / "_tensorflow.py"


def run_python(code, *args):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))


def fake_tensorflow(tmp_path, version="2.21.0"):
    """A `tensorflow` package of the given version."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return tmp_path


# Loads gaviz/_tensorflow.py alone (gaviz's package would import the real TensorFlow).
LOAD_CHECK = textwrap.dedent("""\
    import importlib.util, sys
    sys.path.insert(0, sys.argv[1])
    spec = importlib.util.spec_from_file_location("gaviz_tensorflow_check", sys.argv[2])
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    print("imported")
    """)


def test_old_tensorflow_is_named_with_how_to_install(tmp_path):
    result = run_python(LOAD_CHECK, str(fake_tensorflow(tmp_path, version="2.15.1")), str(MODULE))
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()
    assert any("ImportError: gaviz needs TensorFlow >= 2.16" in line for line in error), result.stderr
    assert "Received: TensorFlow 2.15.1" in result.stderr
    for way in ("gaviz[tensorflow]", "gaviz[and-cuda]", "gaviz[tensorflow-cpu]", "tensorflow>=2.16"):
        assert way in result.stderr


def test_missing_tensorflow_is_named_with_how_to_install(tmp_path):
    hide = "import sys; sys.modules['tensorflow'] = None\n"  # as if it were not installed
    result = run_python(hide + LOAD_CHECK, str(tmp_path), str(MODULE))
    assert result.returncode == 1
    assert "ImportError: gaviz needs TensorFlow, and no TensorFlow is installed" in result.stderr
    for way in ("gaviz[tensorflow]", "gaviz[and-cuda]", "gaviz[tensorflow-cpu]", ">= 2.16"):
        assert way in result.stderr
