"""Every lesson runs top to bottom on a fresh kernel, within Binder's limits and
with nothing red, and is committed without outputs.

Each lesson runs once per test session: in JupyterLab in Chromium when the
browser walk (tests/browser/test_first_run_in_jupyterlab.py) is collected,
which checks the same things; here, through nbclient, when it is not (no
Chromium, or only this file selected). See tests/conftest.py.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import types
import unittest.mock

import nbformat
import numpy as np
import pytest
from lesson_runner import (
    LESSONS,
    MEMORY_LIMIT_MIB,
    PEAK_PROBE,
    LessonRun,
    faults,
    lesson_paths,
    misleading_outputs,
    peak_mib,
    process_peak_mib,
    run_lesson,
)

EXPECTED = [f"{n:02d}" for n in range(14)]
# The whole course (Kaggle Learn runs about 500 words a lesson); 11,000 since the capstone on
# real text (issue #25, "A capstone on real text"), about 900 words of its own; 11,500 with the
# cached window, a loss that couples rows (issue #58).
MARKDOWN_WORDS = 11_500
CODE_CELL_LINES = 30
REPOSITORY = "gaviz/gaviz"


def test_the_course_is_complete():
    numbers = [p.name[:2] for p in lesson_paths()]
    assert numbers == EXPECTED, numbers
    for path in lesson_paths():
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), path.name


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_committed_without_outputs(path):
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, path.name


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_lesson_runs_top_to_bottom(path, record_property):
    run = run_lesson(path)
    record_property("seconds", round(run.seconds, 1))
    print(f"{path.name}: {run.seconds:.1f} s, peak {run.peak_mib:.0f} MiB")
    # Red in JupyterLab looks like an error to a newcomer: a lesson shows none
    # (its lessons' errors are caught and printed, as part of what it teaches).
    found = faults(path.name, run)
    assert found == [], "\n".join(found)


def test_peak_is_the_kernels_own():
    """A kernel is forked from this (large, late in the suite) pytest process: its
    peak must not include the memory of the process it was started from."""
    parent_mib = 400
    held = np.ones(parent_mib * 2**20 // 8)  # resident: every page written
    result = subprocess.run([sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True,
                            timeout=60, check=True)
    child_mib = peak_mib(result.stdout)
    assert 0 < child_mib < parent_mib / 2, (child_mib, held.nbytes)


def test_solutions_are_loadable_files():
    solutions = sorted((LESSONS / "solutions").glob("*.py"))
    assert solutions, "no exercise solutions"
    mentioned = "".join(p.read_text() for p in lesson_paths())
    for solution in solutions:
        assert f"solutions/{solution.name}" in mentioned, f"{solution.name} is used by no lesson"


def _cells(path, kind):
    notebook = json.loads(path.read_text())
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == kind]


def test_the_course_is_short():
    words = {p.name: sum(len(m.split()) for m in _cells(p, "markdown")) for p in lesson_paths()}
    assert sum(words.values()) <= MARKDOWN_WORDS, words


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_code_cells_are_short(path):
    lengths = [len(code.splitlines()) for code in _cells(path, "code")]
    assert max(lengths) <= CODE_CELL_LINES, (path.name, lengths)


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_badges_open_this_lesson_on_binder_and_colab(path):
    title = _cells(path, "markdown")[0]
    assert f"mybinder.org/v2/gh/{REPOSITORY}/HEAD?urlpath=lab/tree/lessons/{path.name}" in title
    assert f"colab.research.google.com/github/{REPOSITORY}/blob/main/lessons/{path.name}" in title


def _bootstrap(path):
    """The first cell's Colab set-up: up to its chdir into the course (what
    follows, before ``import gaviz``, is the lesson's own start)."""
    first = _cells(path, "code")[0]
    end = first.index("\n", first.index("os.chdir(")) + 1
    assert end < first.index("import gaviz"), path.name
    return first[:end]


def test_every_lesson_starts_with_the_same_colab_bootstrap():
    bootstraps = {p.name: _bootstrap(p) for p in lesson_paths()}
    assert len(set(bootstraps.values())) == 1, sorted(bootstraps)


def test_the_bootstrap_does_nothing_outside_colab(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with unittest.mock.patch("subprocess.run") as run:
        exec(_bootstrap(lesson_paths()[0]), {})
    assert run.call_count == 0 and pathlib.Path.cwd() == tmp_path


def test_on_colab_the_bootstrap_fetches_the_course_and_installs_gaviz(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    with unittest.mock.patch("subprocess.run") as run, unittest.mock.patch("os.chdir") as chdir, \
            unittest.mock.patch("os.path.isdir", return_value=False):
        exec(_bootstrap(lesson_paths()[0]), {})
    clone, install = (call.args[0] for call in run.call_args_list)
    assert clone[:2] == ["git", "clone"] and f"https://github.com/{REPOSITORY}" in clone
    assert install[1:4] == ["-m", "pip", "install"] and install[-1] == clone[-1]
    chdir.assert_called_once_with(f"{clone[-1]}/lessons")


def test_a_lesson_fails_for_red_output_or_a_peak_over_binders_memory():
    assert faults("05.ipynb", LessonRun(30.0, 700.0, [])) == []
    [red] = faults("05.ipynb", LessonRun(30.0, 700.0, [(3, "Traceback")]))
    assert "code cell 3" in red and "Traceback" in red
    [heavy] = faults("05.ipynb", LessonRun(30.0, MEMORY_LIMIT_MIB + 1.0, []))
    assert "05.ipynb" in heavy and f"{MEMORY_LIMIT_MIB} MiB" in heavy


def test_a_lesson_fails_for_incorrect_before_an_attempt_or_progress_bar_debris():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="\r\x1b[1m5/5\x1b[0m ━━━━\b\b loss: 1.0\n")]),
        nbformat.v4.new_code_cell("2", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/plain": "✗ Incorrect (13 tokens): ..."})]),
        nbformat.v4.new_code_cell("3", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="5/5 - 0s - loss: 1.0\n◇ Demonstration\n")]),
    ])
    found = faults("09.ipynb", LessonRun(30.0, 700.0, [], misleading_outputs(notebook)))
    assert [line.split(" shows ")[0] for line in found] == ["09.ipynb: code cell 1"] * 3 + [
        "09.ipynb: code cell 2"], found
    assert "backspace" in found[0] and "Incorrect" in found[3]


def test_no_markdown_line_renders_as_an_accidental_heading():
    """'#19987, ...' at a line's start is a heading to the docs site's renderer."""
    for path in lesson_paths():
        for text in _cells(path, "markdown"):
            for line in text.splitlines():
                assert not re.match(r"#+[^#\s]", line), (path.name, line)


def test_another_processs_peak_is_read_from_proc():
    """How the browser walk measures the kernel JupyterLab started."""
    held = np.ones(200 * 2**20 // 8)  # 200 MiB resident: every page written
    assert process_peak_mib(os.getpid()) > 200, held.nbytes
