"""The package's parts import downward only: training/ nothing of gallery/ or
widgets/, gallery/ nothing of widgets/, the top (the doors, quiet, demo,
plotting, the command line) nothing of gallery/ or widgets/ but what the
command line and the public names load when asked (docs/guide/layout.md)."""

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

GAVIZ = pathlib.Path(__file__).resolve().parents[1] / "gaviz"
#: What each part must not import, at the top of a module.
FORBIDDEN = {
    "training": ("gaviz.gallery", "gaviz.widgets", "gaviz.course"),
    "gallery": ("gaviz.widgets", "gaviz.course"),
    "widgets": ("gaviz.course",),
}


def top_level_imports(path):
    """The modules ``path`` imports at its top level (not inside a function)."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def upward_imports(root):
    found = {}
    for part, forbidden in FORBIDDEN.items():
        for path in sorted((root / part).rglob("*.py")):
            wrong = [name for name in top_level_imports(path) if name.startswith(forbidden)]
            if wrong:
                found[str(path.relative_to(root))] = wrong
    return found


def test_each_part_imports_only_downward():
    assert upward_imports(GAVIZ) == {}


def test_an_upward_import_is_found(tmp_path):
    for part in FORBIDDEN:
        (tmp_path / part).mkdir()
    (tmp_path / "training" / "trainer.py").write_text("from gaviz.gallery import pitfalls\n")
    (tmp_path / "gallery" / "measure.py").write_text("import gaviz.widgets.liveplot\n")
    assert upward_imports(tmp_path) == {
        "gallery/measure.py": ["gaviz.widgets.liveplot"],
        "training/trainer.py": ["gaviz.gallery", "gaviz.gallery.pitfalls"],
    }


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_each_part_is_a_package_that_re_exports_its_names(part):
    package = importlib.import_module(f"gaviz.{part}")
    assert package.__all__ and all(hasattr(package, name) for name in package.__all__)


def test_the_plots_load_no_tensorflow():
    """plotting.py draws with matplotlib alone (its argument checks are
    gaviz/_arguments.py's): a figure of finished runs needs no TensorFlow."""
    code = ("import sys\nimport gaviz.plotting, gaviz._arguments, gaviz.lesson_files\n"
            "print('tensorflow' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert out.strip() == "False"
