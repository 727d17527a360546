"""Binder's exact pins stay inside the package's own ranges."""

import pathlib

import tomllib
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Binder installs the CPU build of TensorFlow under its own name.
SAME_PACKAGE = {"tensorflow-cpu": "tensorflow"}


def pins():
    found = {}
    for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-e"):
            continue
        requirement = Requirement(line)
        (version,) = [s.version for s in requirement.specifier if s.operator == "=="]
        found[requirement.name.lower()] = version
    return found


def test_every_dependency_is_pinned_exactly_and_in_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = [Requirement(r) for r in project["dependencies"]]
    ranges += [Requirement(r) for r in project["optional-dependencies"]["lab"]]
    pinned = pins()
    by_name = {SAME_PACKAGE.get(name, name): version for name, version in pinned.items()}
    for requirement in ranges:
        name = requirement.name.lower()
        assert name in by_name, f"{name} is not pinned in binder/requirements.txt"
        assert requirement.specifier.contains(by_name[name]), (name, by_name[name], str(requirement))


def test_binder_installs_the_package_and_picks_python():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "\n-e .\n" in f"\n{text}\n"
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    assert "keras" in pins()  # Keras 3 pinned too, not left to TensorFlow's range
