#!/usr/bin/env python3
"""Prints pyproject.toml's lower bounds as pins, for pip: the oldest TensorFlow
and Keras gaviz claims, which `make test-oldest` installs and tests.

Usage: .ci/lowest_pins.py EXTRA   (EXTRA: the TensorFlow extra, e.g. tensorflow-cpu)
Prints e.g. "keras==3.14.0 tensorflow-cpu==2.16.2".
"""

import pathlib
import re
import sys

import tomllib

PROJECT = tomllib.loads(
    (pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
)["project"]


def pin(requirement: str) -> str:
    """``name>=version`` as ``name==version`` (extras such as [and-cuda] dropped)."""
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9.]+)", requirement.strip())
    if match is None:
        raise SystemExit(f"no lower bound to pin in {requirement!r}")
    return f"{match[1]}=={match[2]}"


def main(extra: str) -> str:
    keras = [r for r in PROJECT["dependencies"] if r.startswith("keras")]
    tensorflow = PROJECT["optional-dependencies"][extra]
    return " ".join(pin(r) for r in keras + tensorflow)


if __name__ == "__main__":
    print(main(sys.argv[1]))
