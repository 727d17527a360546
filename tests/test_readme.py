"""The README as a front page, and its examples as the README shows them. The examples
run as printed in ``make test-e2e``, from the installed wheel as a user meets them
(tests/test_wheel.py): each in a fresh process, nothing on stderr, and what it prints
is what the README shows (tests/readme_examples.py)."""

import pathlib

from readme_examples import Example, differences, examples

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_bytes()) <= 13 * 1024
    assert sorted(examples()) == ["diagnose", "readme", "readme-accumulator", "readme-keras"]


def test_the_first_example_is_ten_lines():
    assert len(examples()["readme"].code.strip().splitlines()) <= 10


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
