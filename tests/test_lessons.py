"""Every lesson runs top to bottom on a fresh kernel, within Binder's limits and
with nothing red, and is committed without outputs."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from lesson_runner import LESSONS, PEAK_PROBE, lesson_paths, peak_mib, run_lesson

MEMORY_LIMIT_MIB = 1536  # Binder gives 1-2 GB
EXPECTED = [f"{n:02d}" for n in range(11)]


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
    assert run.peak_mib < MEMORY_LIMIT_MIB
    # Red in JupyterLab looks like an error to a newcomer: a lesson shows none
    # (its lessons' errors are caught and printed, as part of what it teaches).
    assert run.red == [], "\n".join(f"code cell {n}: {text}" for n, text in run.red)


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
