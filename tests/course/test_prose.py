"""The lessons' prose says what their cells and gaviz do (issue #49's walk): a name the prose
tells the learner to call is imported, a number a cell prints is explained where it first
appears, the exercises' help does what lesson 00 says, and the recap holds what a learner's
own notebook needs."""

import json
import re

import pytest
from lesson_runner import LESSONS, lesson_paths

from gaviz.course import lesson04

#: Standard-library modules a lesson's prose may tell the learner to use.
MODULES = ("functools", "itertools", "math", "statistics", "time", "collections")


def _sources(path, kind):
    return ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]
            if cell["cell_type"] == kind]


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_a_module_the_prose_calls_is_imported_by_the_lesson(path):
    prose, code = "\n".join(_sources(path, "markdown")), "\n".join(_sources(path, "code"))
    for module in MODULES:
        if re.search(rf"`[^`]*\b{module}\.\w+", prose):
            assert re.search(rf"^\s*import {module}\b", code, re.M), (path.name, module)


def test_lesson_04_explains_the_learning_rate_ratio_its_summary_prints():
    """Lesson 05 defines it; lesson 04's compare_with_exact summary shows it first."""
    prose = " ".join(" ".join(_sources(LESSONS / "04_pitfall_missing_reset.ipynb",
                                       "markdown")).split())
    assert "effective learning-rate ratio 1 (its size over the exact update's)" in prose


def test_lesson_00_says_what_solution_shows(capsys):
    prose = " ".join(" ".join(_sources(LESSONS / "00_welcome.ipynb", "markdown")).split())
    assert "`.solution()` shows the whole solution, and the `%load` line" in prose
    page = " ".join((LESSONS.parent / "docs" / "lessons" / "index.md").read_text().split())
    assert "`.solution()` shows the solution's code and the `%load" in page
    lesson04.reset.solution()
    shown = capsys.readouterr().out
    assert "%load solutions/04_reset.py" in shown and "accumulator.assign(" in shown


def test_the_recap_says_how_a_notebook_of_your_own_starts_quiet():
    recap = _sources(LESSONS / "13_capstone_real_text.ipynb", "markdown")[-1]
    assert "The course, on one page" in recap and "`import gaviz.quiet`" in recap


def test_the_capstone_asks_for_no_input_signature_lesson_08_did_not():
    """Lesson 08's exercise never asked for one: the capstone says why its loop needs it."""
    prose = " ".join(" ".join(_sources(LESSONS / "13_capstone_real_text.ipynb",
                                       "markdown")).split())
    assert "with its `input_signature`" not in prose
    assert "`tf.function` micro-step traces once with `input_signature=" in prose
