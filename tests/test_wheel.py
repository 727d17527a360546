"""What a pip user gets: the wheel built from this checkout, installed (not editable)
in a clean virtual environment next to an installed TensorFlow, runs the README's
examples as the README shows them and copies the course out with `gaviz lessons`.

The clean environment borrows this one's TensorFlow, Keras and the rest through a
.pth file naming this environment's site-packages (installing TensorFlow afresh
takes minutes and 1.5 GB). A directory named in a .pth file is only added to
sys.path, its own .pth files are not run, so this environment's editable gaviz
(hooked in by such a file) stays out: the test checks that gaviz is imported
from the clean environment.
"""

from __future__ import annotations

import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import readme_examples
from lesson_runner import newcomer_env

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "gaviz", "lessons"]
COURSE = sorted(str(p.relative_to(ROOT / "lessons")) for p in (ROOT / "lessons").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts)


def run(*command, cwd, timeout=600):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                            timeout=timeout, cwd=cwd, env=newcomer_env())
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel `pip wheel` builds from a copy of the checkout's sources (so that no
    build/ or *.egg-info lands in the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tmp / "src" / name,
                            ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            (tmp / "src").mkdir(exist_ok=True)
            shutil.copy(ROOT / name, tmp / "src" / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", tmp / "dist",
        tmp / "src", cwd=tmp)
    (built,) = (tmp / "dist").glob("gaviz-*.whl")
    print(f"{built.name}: {built.stat().st_size / 1024:.0f} KiB")
    return built


@pytest.fixture(scope="module")
def clean_python(wheel, tmp_path_factory):
    """A fresh venv's Python with the wheel installed, seeing this environment's packages."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=venv.parent)
    python = venv / "bin" / "python"
    # Installed before the .pth exists: pip then sees no other gaviz to replace.
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "--quiet", wheel, cwd=venv.parent)
    purelib = pathlib.Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                               cwd=venv.parent).stdout.strip())
    here = [sysconfig.get_path("purelib"), *site.getsitepackages()]
    (purelib / "borrowed_from_the_test_environment.pth").write_text(
        "\n".join(dict.fromkeys(here)) + "\n")
    return python


def test_the_wheel_carries_the_package_the_course_and_the_license(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packages = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "gaviz").rglob("__init__.py"))
    for package in packages:
        assert f"{package}/__init__.py" in names, f"{package} is missing from pyproject's packages"
    course = sorted(n.removeprefix("gaviz/_lessons/") for n in names if n.startswith("gaviz/_lessons/"))
    assert course == COURSE
    assert sum(n.endswith(".ipynb") for n in course) == 14
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/", "lessons/")) for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: Source, https://github.com/gaviz/gaviz" in metadata


def test_the_installed_wheel_is_the_gaviz_imported(clean_python, tmp_path):
    found = run(clean_python, "-c", "import gaviz, sys; print(gaviz.__file__); print(sys.prefix)",
                cwd=tmp_path).stdout.split()
    assert found[0].startswith(found[1]) and "site-packages" in found[0], found


@pytest.mark.parametrize("name", ["readme", "readme-keras", "readme-accumulator", "diagnose"])
def test_readme_examples_run_from_the_wheel(clean_python, tmp_path, name):
    example = readme_examples.examples()[name]
    readme_examples.check(example, readme_examples.run(example, str(clean_python), tmp_path))


@pytest.mark.parametrize("how", ["gaviz", "python -m gaviz"])
def test_gaviz_lessons_copies_the_course_from_the_wheel(clean_python, tmp_path, how):
    command = ([clean_python.parent / "gaviz"] if how == "gaviz" else [clean_python, "-m", "gaviz"])
    result = run(*command, "lessons", tmp_path / "course", cwd=tmp_path, timeout=120)
    assert result.stderr == ""
    assert f"jupyter lab {tmp_path / 'course'}" in result.stdout
    copied = sorted(str(p.relative_to(tmp_path / "course")) for p in (tmp_path / "course").rglob("*")
                    if p.is_file())
    assert copied == COURSE
    for name in COURSE:
        assert (tmp_path / "course" / name).read_bytes() == (ROOT / "lessons" / name).read_bytes()
