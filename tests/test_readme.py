"""The README's examples run as printed: each in a fresh process, nothing on stderr, and
what it prints is what the README shows (tests/readme_examples.py; tests/test_wheel.py
runs them again from an installed wheel)."""

import pathlib
import sys

import pytest
import readme_examples
from readme_examples import Example, differences, examples

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_bytes()) <= 13 * 1024
    assert sorted(examples()) == ["diagnose", "readme", "readme-accumulator", "readme-keras"]


def test_the_first_example_is_ten_lines():
    assert len(examples()["readme"].code.strip().splitlines()) <= 10


@pytest.mark.parametrize("name", ["readme", "readme-keras", "readme-accumulator", "diagnose"])
def test_example_prints_what_the_readme_shows(name):
    example = examples()[name]
    readme_examples.check(example, readme_examples.run(example, sys.executable, ROOT))


def test_the_first_example_says_what_it_trained():
    """32 updates: 4096 samples in micro-batches of 32, 8 per update, for 2 epochs."""
    assert examples()["readme"].shown.startswith(f"{4096 // (32 * 8) * 2} updates, loss ")


def test_printed_numbers_may_differ_only_by_rounding():
    shown = "32 updates, loss 2.72 -> 1.33\n{'loss': 1.8429629802703857}\n"
    assert differences(shown, "32 updates, loss 2.7201 -> 1.3300\n{'loss': 1.84296}\n") == []
    for wrong in ("31 updates, loss 2.72 -> 1.33\n{'loss': 1.8429629802703857}\n",  # an integer
                  "32 updates, loss 2.72 -> 1.53\n{'loss': 1.8429629802703857}\n",  # 15% off
                  "32 updates, loss 2.72 -> 1.33\n{'mae': 1.8429629802703857}\n",   # the text
                  "32 updates, loss 2.72 -> 1.33\n"):                               # a line
        assert differences(shown, wrong), wrong


def test_examples_are_found_by_their_markers():
    text = ("<!-- a-example: x -->\n```python\nprint(1)\n```\n```text\n1\n```\n"
            "```python\nprint(2)\n```\n")  # unmarked: not an example
    assert examples(text) == {"a": Example("a", "print(1)\n", "1\n")}
