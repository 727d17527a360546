"""A first run shows nothing red: after a quiet start (``import gaviz.quiet``: the
command line, the lessons' first cells) TensorFlow's start-up log is kept off
stderr and real errors still show; ``import gaviz`` alone touches no file
descriptor and shows what ``import tensorflow`` shows; a missing or old
TensorFlow is named with how to install it; JupyterLab opens a lesson without
marking it modified."""

import json
import pathlib
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel
from lesson_runner import lesson_paths, newcomer_env

from gaviz import _tensorflow

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_python(code, *args):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, env=newcomer_env(), cwd=ROOT)


# What TensorFlow 2.21 (the full wheel) printed on importing it on a 2-core machine
# without a GPU, as captured by gaviz (`gaviz._tensorflow.native_log`).
STARTUP = textwrap.dedent("""\
    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795316036.490718   15055 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
    I0000 00:00:1795316036.491249   15055 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    I0000 00:00:1795316036.582967   15055 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
    To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 AVX512_FP16 AVX_VNNI AMX_TILE AMX_INT8 AMX_BF16 FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795316039.912951   15055 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
    I0000 00:00:1795316039.913750   15055 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 00:00:1795316041.260031   15055 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
    """)


def test_the_start_up_log_is_all_noise():
    assert _tensorflow.filter_native_log(STARTUP) == ""


def test_warnings_and_errors_are_kept():
    real = ("W0000 00:00:1795316036.5   15055 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
            "E0000 00:00:1795316036.6   15055 cuda_dnn.cc:522] Loaded runtime CuDNN library: 8.1.0\n"
            "  but source was compiled with: 8.9.4.\n"
            "Illegal instruction: AVX512 not supported\n")
    assert _tensorflow.filter_native_log(STARTUP + real) == real
    # With a driver present, a failed CUDA initialization is a real error.
    with_driver = "\n".join(line for line in STARTUP.splitlines() if "cuda drivers" not in line) + "\n"
    assert _tensorflow.filter_native_log(with_driver).startswith("E0000")
    assert "failed call to cuInit" in _tensorflow.filter_native_log(with_driver)


def test_quiet_import_is_silent():
    result = run_python("import gaviz.quiet, keras, gaviz._tensorflow as t; print(len(t.native_log))")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert int(result.stdout) > 0, "TensorFlow printed nothing to silence: the test proves nothing"


# Records every call that would move a file descriptor, then imports gaviz and trains.
MARK = "-- TensorFlow loaded --"
COUNT_DESCRIPTOR_CALLS = textwrap.dedent(f"""\
    MARK = {MARK!r}
    import os, sys
    calls = []
    for name in ("dup", "dup2"):
        def record(*args, _real=getattr(os, name), _name=name):
            calls.append(_name)
            return _real(*args)
        setattr(os, name, record)
    import gaviz
    print("tensorflow" in sys.modules)
    import keras
    gaviz.AccumulationTrainer
    print(MARK, file=sys.stderr, flush=True)  # what follows is training's
    x, y = gaviz.demo.make_data(64, seed=0)
    trainer = gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0), keras.optimizers.SGD(0.01), "mse", 2)
    trainer.fit(x, y, batch_size=16, verbose=0)
    print(calls)
    """)


def without_times(log):
    """A native log's lines with their times and thread ids left out, to compare two runs."""
    return [re.sub(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ ", r"\1 ", line)
            for line in log.splitlines()]


def test_import_gaviz_touches_no_file_descriptor():
    """A library imported into a practitioner's process redirects nothing: ``import
    gaviz`` loads no TensorFlow, and once it does, stderr holds what ``import
    tensorflow`` prints, nothing more and nothing less."""
    result = run_python(COUNT_DESCRIPTOR_CALLS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "[]"]
    plain = run_python("import tensorflow, keras")
    assert plain.stderr, "TensorFlow printed nothing here: the comparison proves nothing"
    on_loading = result.stderr.split(MARK)[0]
    assert without_times(on_loading) == without_times(plain.stderr)


def test_the_quiet_start_moves_descriptor_two():
    """The test above can fail: with a quiet start the same run moves descriptor 2."""
    result = run_python("import gaviz.quiet\n" + COUNT_DESCRIPTOR_CALLS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "True" and "dup2" in result.stdout
    assert result.stderr == MARK + "\n"  # training included


def test_a_quiet_start_after_tensorflow_says_it_is_too_late():
    result = run_python("import tensorflow\nimport gaviz.quiet\n")
    assert result.returncode == 0, result.stderr
    assert "gaviz.quiet was imported after TensorFlow" in result.stderr
    assert 'File "<string>", line 2' in result.stderr or "<string>:2" in result.stderr


HALF_FALLBACK = ("E0000 00:00:1795465995.721442   22820 util.cc:131] oneDNN supports DT_HALF only "
                 "on platforms with AVX-512. Falling back to the default Eigen-based "
                 "implementation if present.\n")


def test_float16s_fallback_log_is_noise():
    assert _tensorflow.filter_native_log(STARTUP + HALF_FALLBACK) == ""


def test_mixed_float16_training_shows_no_native_log():
    """On a CPU without AVX-512 FP16 (this project's CI machines, some of them),
    TensorFlow logs float16's fallback as an error at the first float16 op: the
    trainer's first forward pass, which gaviz filters after a quiet start (the
    log keeps it)."""
    result = run_python(
        "import gaviz.quiet, gaviz._tensorflow as t, keras\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "x, y = gaviz.demo.make_data(64, seed=0)\n"
        "trainer = gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0),\n"
        "    keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01)), 'mse', 2)\n"
        "trainer.fit(x, y, batch_size=16, verbose=0)\n"
        "print('DT_HALF' in t.native_log, 'oneDNN custom operations are on' in t.native_log)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    with open("/proc/cpuinfo") as cpuinfo:
        fast_half = "avx512_fp16" in cpuinfo.read()
    # Where oneDNN runs (TensorFlow turns it on for CPUs with AVX-512) and the CPU
    # lacks fast float16, the message was logged, and caught.
    logged, one_dnn = result.stdout.split()
    assert logged == str(one_dnn == "True" and not fast_half)


def test_logging_set_up_during_the_import_still_works():
    # TensorFlow's and absl's logging handlers are made while gaviz imports
    # TensorFlow, and keep the sys.stderr of that moment.
    result = run_python("import gaviz.quiet, tensorflow as tf\n"
                        "from absl import logging\n"
                        "tf.get_logger().warning('from TensorFlow')\n"
                        "logging.warning('from absl')\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "WARNING:tensorflow:from TensorFlow\nWARNING:absl:from absl\n"


def test_command_line_stderr_is_empty_on_success(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gaviz", "compare", "--steps", "1", "2", "--epochs", "1",
         "--samples", "256", "--out", str(tmp_path / "curves.png")],
        capture_output=True, text=True, timeout=300, env=newcomer_env(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "wrote" in result.stdout


def fake_tensorflow(tmp_path, version="2.21.0", native=""):
    """A `tensorflow` package that prints ``native`` to file descriptor 2 when imported."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(f"""\
        import logging, os, sys, warnings
        os.write(2, {native.encode()!r})
        warnings.warn("a Python warning during the import")
        logging.getLogger("tensorflow").addHandler(logging.StreamHandler())  # holds sys.stderr
        __version__ = {version!r}

        class config:
            @staticmethod
            def list_physical_devices(kind=None):
                os.write(2, b"E0000 00:00:1.0 1 devices.cc:1] an error listing devices\\n")
                return []
        """))
    return tmp_path


# gaviz with the fake TensorFlow first on the path: a quiet start, or (argv[2] == "plain")
# the first public name that needs TensorFlow.
LOAD_CHECK = textwrap.dedent("""\
    import sys
    sys.path.insert(0, sys.argv[1])
    if sys.argv[2:] == ["plain"]:
        import gaviz, gaviz._tensorflow
        gaviz._tensorflow.import_tensorflow()
    else:
        import gaviz.quiet
    print("imported")
    import logging
    logging.getLogger("tensorflow").warning("logged after the import")
    """)


def test_real_errors_still_show(tmp_path):
    native = STARTUP + "W0000 00:00:1.0 1 a.cc:1] a real warning\nsome other native output\n"
    result = run_python(LOAD_CHECK, str(fake_tensorflow(tmp_path, native=native)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "imported\n"
    for shown in ("a real warning", "some other native output", "an error listing devices",
                  "UserWarning: a Python warning during the import", "logged after the import"):
        assert shown in result.stderr
    assert "Logging error" not in result.stderr
    for hidden in ("absl::InitializeLog", "oneDNN", "cuda drivers", "cuInit", "To enable"):
        assert hidden not in result.stderr


def test_without_a_quiet_start_the_log_is_tensorflows_own(tmp_path):
    result = run_python(LOAD_CHECK, str(fake_tensorflow(tmp_path, native=STARTUP)), "plain")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(STARTUP)  # all of it, first, as TensorFlow wrote it
    assert "an error listing devices" not in result.stderr  # gaviz lists no devices unasked


@pytest.mark.parametrize("start", ["quiet", "plain"])
def test_old_tensorflow_is_named_with_how_to_install(tmp_path, start):
    result = run_python(LOAD_CHECK, str(fake_tensorflow(tmp_path, version="2.15.1")), start)
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()
    assert any("ImportError: gaviz needs TensorFlow >= 2.16" in line for line in error), result.stderr
    assert "Received: TensorFlow 2.15.1" in result.stderr
    for way in ("gaviz[tensorflow]", "gaviz[and-cuda]", "gaviz[tensorflow-cpu]", "tensorflow>=2.16"):
        assert way in result.stderr


def test_old_tensorflow_is_named_when_a_public_name_is_first_used(tmp_path):
    result = run_python("import sys; sys.path.insert(0, sys.argv[1])\nimport gaviz\n"
                        "print('imported')\ngaviz.AccumulationTrainer\n",
                        str(fake_tensorflow(tmp_path, version="2.15.1")))
    assert result.returncode == 1 and result.stdout == "imported\n"
    assert "ImportError: gaviz needs TensorFlow >= 2.16" in result.stderr


def test_missing_tensorflow_is_named_with_how_to_install(tmp_path):
    """``import gaviz`` itself checks that a TensorFlow is installed."""
    hide = "import sys; sys.modules['tensorflow'] = None\n"  # as if it were not installed
    result = run_python(hide + "import gaviz\n")
    assert result.returncode == 1
    assert "ImportError: gaviz needs TensorFlow, and no TensorFlow is installed" in result.stderr
    for way in ("gaviz[tensorflow]", "gaviz[and-cuda]", "gaviz[tensorflow-cpu]", ">= 2.16"):
        assert way in result.stderr


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_lesson_first_cell_starts_quietly(path):
    """A lesson starts TensorFlow quietly (``import gaviz.quiet``), before anything
    imports it. (That each lesson, first cell included, shows nothing red in a
    newcomer's kernel is tests/course/test_lessons.py's whole-lesson run.)"""
    notebook = nbformat.read(path, as_version=4)
    first = next(c for c in notebook.cells if c.cell_type == "code").source
    assert re.search(r"^import gaviz\.quiet\b", first, re.M), (
        f"{path.name}'s first cell does not import gaviz.quiet")
    before_quiet = first.split("import gaviz.quiet")[0]
    for name in ("tensorflow", "keras", "gaviz"):
        assert f"import {name}" not in before_quiet and f"from {name}" not in before_quiet, (
            f"{path.name}'s first cell imports {name} before gaviz.quiet, which loads TensorFlow quietly")


@pytest.fixture(scope="module")
def kernel_metadata():
    """What JupyterLab writes into a notebook when it connects to the python3 kernel."""
    spec = KernelSpecManager().get_kernel_spec("python3")
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        msg_id = client.kernel_info()
        reply = client.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = client.get_shell_msg(timeout=60)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return {
        "kernelspec": {"display_name": spec.display_name, "language": spec.language, "name": "python3"},
        "language_info": reply["content"]["language_info"],
    }


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_lesson_opens_unmodified(path, kernel_metadata):
    """JupyterLab overwrites kernelspec and language_info with the kernel's on opening a
    notebook, and marks it modified if they differ: commit them as it writes them."""
    metadata = json.loads(path.read_text())["metadata"]
    committed, running = metadata["language_info"]["version"], kernel_metadata["language_info"]["version"]
    assert committed == running, (
        f"{path.name} says Python {committed}, the kernel runs {running}: JupyterLab marks the "
        "lesson modified on opening (language_info.version follows the Python of binder/runtime.txt "
        "and CI)")
    assert metadata == kernel_metadata
