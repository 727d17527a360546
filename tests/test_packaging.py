"""One TensorFlow in every environment; the version in one place; the lab settings shipped."""

import json
import os
import pathlib
import re
import subprocess
import sys
from importlib import metadata

import tomllib
from one_tensorflow import canonical, tensorflow_distributions
from packaging.requirements import Requirement

import gaviz
from gaviz import _tensorflow

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
MINIMUM = ".".join(map(str, _tensorflow.MINIMUM_VERSION))


def test_binder_resolves_to_exactly_one_tensorflow(tmp_path):
    """pip's resolver on binder/requirements.txt, as Binder runs it, installs one TensorFlow."""
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), "-r", "binder/requirements.txt"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    chosen = {canonical(item["metadata"]["name"]): item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    assert tensorflow_distributions(chosen) == ["tensorflow-cpu"], sorted(chosen)
    assert chosen["gaviz"] == PROJECT["version"]
    assert Requirement(f"tensorflow>={MINIMUM}").specifier.contains(chosen["tensorflow-cpu"])


def test_tensorflow_is_checked_at_import_not_required():
    """No TensorFlow distribution is a hard requirement; each extra installs exactly one."""
    names = [Requirement(r).name for r in PROJECT["dependencies"]]
    assert tensorflow_distributions(names) == []
    extras = PROJECT["optional-dependencies"]
    expected = {"tensorflow": "tensorflow", "and-cuda": "tensorflow", "tensorflow-cpu": "tensorflow-cpu"}
    for extra, distribution in expected.items():
        (requirement,) = [Requirement(r) for r in extras[extra]]
        assert canonical(requirement.name) == distribution, extra
        assert str(requirement.specifier) == f">={MINIMUM}", extra
    assert Requirement(extras["and-cuda"][0]).extras == {"and-cuda"}
    # lab, test and hub bring no TensorFlow of their own (hub's KerasHub brings
    # tensorflow-text, which needs `tensorflow`: the Makefile pairs them).
    for extra in ("lab", "test", "hub"):
        assert tensorflow_distributions(Requirement(r).name for r in extras[extra]) == []


def test_makefile_installs_one_extra_tensorflow():
    makefile = (ROOT / "Makefile").read_text()
    assert "TF_EXTRA ?= tensorflow\n" in makefile
    assert '-e ".[$(TF_EXTRA),test$(HUB_EXTRA)]"' in makefile
    assert '-e ".[$(TF_EXTRA),lab]"' in makefile
    # KerasHub's tensorflow-text installs `tensorflow`: only next to that distribution.
    assert "HUB_EXTRA := $(if $(filter tensorflow and-cuda,$(TF_EXTRA)),$(comma)hub,)" in makefile
    assert "tests/one_tensorflow.py" in makefile.split("binder-check:")[1]


def test_one_tensorflow_tells_companions_from_distributions():
    names = ["tensorflow_cpu", "TensorFlow", "tf-nightly", "tensorflow-intel", "tensorflow-io",
             "tensorflow-io-gcs-filesystem", "tensorboard", "tensorflow-estimator", "keras"]
    assert tensorflow_distributions(names) == [
        "tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly"]


def test_version_comes_from_the_package_metadata():
    assert gaviz.__version__ == metadata.version("gaviz") == PROJECT["version"]
    source = (ROOT / "gaviz" / "__init__.py").read_text()
    assert not re.search(r"__version__\s*=\s*['\"]", source), "the version is written in gaviz/__init__.py"


# JupyterLab's own settings schema for the plugin the overrides set.
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def test_lab_settings_turn_the_news_prompt_off():
    overrides = json.loads((ROOT / "binder" / "overrides.json").read_text())
    import jupyterlab

    plugin, name = NOTIFICATION.split(":")
    schema_path = pathlib.Path(jupyterlab.__file__).parent / "schemas" / plugin / f"{name}.json"
    schema = json.loads(schema_path.read_text())["properties"]
    settings = overrides[NOTIFICATION]
    assert settings == {"fetchNews": "false", "checkForUpdates": False}
    # The values are ones the schema allows ("none" is the default: ask).
    assert settings["fetchNews"] in [choice["const"] for choice in schema["fetchNews"]["oneOf"]]
    assert schema["checkForUpdates"]["type"] == "boolean"


def test_post_build_installs_the_settings_where_jupyterlab_reads_them(tmp_path):
    # A stand-in Python that names tmp_path as its environment's prefix.
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho {tmp_path / 'env'}\n")
    python.chmod(0o755)
    subprocess.run([str(ROOT / "binder" / "postBuild"), str(python)], check=True, cwd=tmp_path)
    settings_dir = tmp_path / "env" / "share" / "jupyter" / "lab" / "settings"
    assert (settings_dir / "overrides.json").read_bytes() == (ROOT / "binder" / "overrides.json").read_bytes()

    from jupyterlab_server.settings_utils import _get_overrides

    overrides, error = _get_overrides(str(settings_dir))
    assert not error and overrides[NOTIFICATION]["fetchNews"] == "false"


def test_this_environment_has_the_settings():
    """`make test` and `make lab` ran binder/postBuild on .venv (JupyterLab's app settings dir)."""
    installed = pathlib.Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert installed.exists(), f"{installed} is missing: run `binder/postBuild {sys.executable}`"
    assert json.loads(installed.read_text()) == json.loads((ROOT / "binder" / "overrides.json").read_text())


def test_binder_runs_post_build():
    post_build = ROOT / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK), "repo2docker runs binder/postBuild only if it is executable"
    assert "binder/postBuild $(VENV_BINDER)/bin/python" in (ROOT / "Makefile").read_text()


def test_every_public_name_resolves_and_the_old_alias_is_gone():
    """Public names are loaded on first use (gaviz/__init__.py): each one in __all__ loads."""
    for name in gaviz.__all__:
        assert getattr(gaviz, name) is not None, name
    assert set(gaviz.__all__) <= set(dir(gaviz))
    assert not hasattr(gaviz, "Run")  # the old name of gaviz.RunResult


def test_the_oldest_pair_ci_runs_is_pyprojects_lower_bounds():
    """make test-oldest installs exactly pyproject's lower bounds, which are the
    versions gaviz checks for at run time."""
    from gaviz import _keras

    pins = subprocess.run([sys.executable, ".ci/lowest_pins.py", "tensorflow-cpu"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()
    keras_minimum = ".".join(map(str, _keras.MINIMUM_VERSION))
    assert pins == [f"keras=={keras_minimum}", f"tensorflow-cpu=={MINIMUM}"]
    makefile = (ROOT / "Makefile").read_text()
    assert "$$($(PYTHON) .ci/lowest_pins.py tensorflow-cpu)" in makefile.split("test-oldest:")[1]
    assert "make test-oldest" in (ROOT / ".ci" / "run").read_text()
