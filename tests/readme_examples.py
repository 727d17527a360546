"""The README's Python examples: found by their HTML comment markers, run in a fresh
process as a reader would run them, and compared with the output the README shows.

A marked example is ``<!-- NAME-example: ... -->``, a ```python block, then a
```text block of what it prints. Printed numbers may differ from the shown ones
in their last digits from one platform to another: integers must be equal,
decimals within ``RELATIVE`` (or ``ABSOLUTE``) of the shown value; all other
text exactly equal.
"""

from __future__ import annotations

import math
import pathlib
import re
import subprocess
from typing import NamedTuple

from lesson_runner import newcomer_env

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
EXAMPLE = re.compile(r"<!-- ([\w-]+)-example\b.*?-->\s*```python\n(.*?)```\s*```text\n(.*?)```", re.S)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
RELATIVE, ABSOLUTE = 0.02, 1e-3


class Example(NamedTuple):
    name: str
    code: str
    shown: str


def examples(text: str | None = None) -> dict[str, Example]:
    """The README's examples, by name (``readme``, ``readme-keras``, ``readme-accumulator``,
    ``diagnose``)."""
    found = [Example(*match) for match in EXAMPLE.findall(README.read_text() if text is None else text)]
    return {example.name: example for example in found}


def differences(shown: str, printed: str) -> list[str]:
    """How ``printed`` differs from ``shown``, beyond platform rounding; [] when it does not."""
    shown_lines, printed_lines = shown.strip().splitlines(), printed.strip().splitlines()
    if len(shown_lines) != len(printed_lines):
        return [f"{len(printed_lines)} lines printed, {len(shown_lines)} shown:\n{printed}"]
    found = []
    for want, got in zip(shown_lines, printed_lines):
        same_text = NUMBER.split(want) == NUMBER.split(got)
        pairs = list(zip(NUMBER.findall(want), NUMBER.findall(got)))
        if not same_text or len(pairs) != len(NUMBER.findall(want)) or not all(
                _close(a, b) for a, b in pairs):
            found.append(f"shown:   {want}\nprinted: {got}")
    return found


def _close(shown: str, printed: str) -> bool:
    if re.fullmatch(r"-?\d+", shown):
        return shown == printed
    return math.isclose(float(shown), float(printed), rel_tol=RELATIVE, abs_tol=ABSOLUTE)


def run(example: Example, python: str, cwd: pathlib.Path,
        env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs an example in a fresh ``python -c`` in ``cwd``, in a newcomer's environment
    (with ``env``'s variables set too)."""
    return subprocess.run([python, "-c", example.code], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**newcomer_env(), **(env or {})})


def check(example: Example, result: subprocess.CompletedProcess):
    """The example ran, printed nothing to stderr, and printed what the README shows."""
    assert result.returncode == 0, f"{example.name}: {result.stderr}"
    assert result.stderr == "", f"{example.name} printed to stderr:\n{result.stderr}"
    problems = differences(example.shown, result.stdout)
    assert problems == [], f"{example.name}:\n" + "\n".join(problems)
