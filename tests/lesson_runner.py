"""Runs lesson notebooks top to bottom on a fresh kernel, as a newcomer's
JupyterLab would: used by the tests and by `make binder-check` (which has no
pytest).

    python tests/lesson_runner.py [--save DIR] [lessons/NN_topic.ipynb ...]

With --save (or GAVIZ_EXECUTED_LESSONS set to a folder), each lesson that ran
without a fault is also written there with its outputs, as DIR/NN_topic.ipynb:
the documentation site renders those copies instead of running the lessons
again (`make docs`; see CONTRIBUTING.md).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from typing import NamedTuple

import nbformat
from nbclient import NotebookClient

LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"
#: The folder `make binder-check` and `make docs` save executed lessons to, when set.
SAVE_ENV = "GAVIZ_EXECUTED_LESSONS"
MEMORY_LIMIT_MIB = 1536  # Binder gives 1-2 GB: a lesson's kernel peaks below this
# The kernel's own peak resident memory, in KiB. Linux's VmHWM counts only the
# program the kernel runs; getrusage's ru_maxrss would also count the process it
# was forked from (Linux keeps the larger of the two across exec), so a kernel
# started from a pytest process of 1.5 GB would report 1.5 GB whatever the lesson
# does. ru_maxrss (KiB on Linux) is the fallback where /proc is missing.
PEAK_PROBE = """\
import resource as _r, sys as _s
try:
    with open("/proc/self/status") as _f:
        _peak = next(int(_l.split()[1]) for _l in _f if _l.startswith("VmHWM:"))
except (OSError, StopIteration):
    _peak = _r.getrusage(_r.RUSAGE_SELF).ru_maxrss
_s.stdout.write(f"GAVIZ_PEAK_KIB={_peak}\\n")
"""


def peak_mib(text):
    """The peak PEAK_PROBE printed in ``text``, in MiB."""
    return int(text.split("GAVIZ_PEAK_KIB=")[1].split()[0]) / 1024


def process_peak_mib(pid):
    """The peak resident memory (VmHWM) of another running process, in MiB."""
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmHWM:"))) / 1024


def faults(name, run):
    """What is wrong with one run of a lesson, as lines (none when it passed)."""
    found = [f"{name}: red output in code cell {number}:\n{text}" for number, text in run.red]
    found += [f"{name}: code cell {number} shows {what}" for number, what in run.misleading]
    if run.peak_mib >= MEMORY_LIMIT_MIB:
        found.append(f"{name}: kernel peaked at {run.peak_mib:.0f} MiB, over Binder's "
                     f"{MEMORY_LIMIT_MIB} MiB")
    return found


def lesson_paths():
    return sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def newcomer_env():
    """The environment of a newcomer's shell: no TensorFlow log level set, and no
    PYTEST_CURRENT_TEST, under which ipykernel stops sending what the process
    writes to file descriptor 2 (TensorFlow's log) to the notebook."""
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


class LessonRun(NamedTuple):
    """What one run of a lesson showed and cost."""

    seconds: float
    peak_mib: float  # the kernel's peak resident memory
    red: list  # (code cell number from 1, text) of each stderr or error output
    misleading: list = []  # (code cell number from 1, what) of each output that misleads


#: What no lesson's output shows, run as shipped or solved: a learner reads "✗
#: Incorrect" as their own failure (a lesson demonstrating a wrong answer labels
#: it a demonstration), and a progress bar's control characters (backspaces,
#: carriage returns, colour codes) render as debris on the documentation site.
INCORRECT = "✗ Incorrect"
CONTROL_CHARACTERS = {"\b": "a backspace", "\r": "a carriage return", "\x1b[": "a colour code"}


def red_outputs(notebook):
    """The outputs JupyterLab shows in red (stderr, errors), by code cell."""
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    red = []
    for number, cell in enumerate(code, start=1):
        for output in cell.outputs:
            if output.get("name") == "stderr":
                red.append((number, output.text))
            elif output.output_type == "error":
                red.append((number, f"{output.ename}: {output.evalue}"))
    return red


def misleading_outputs(notebook):
    """The outputs that mislead (see INCORRECT, CONTROL_CHARACTERS), by code cell."""
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    found = []
    for number, cell in enumerate(code, start=1):
        texts = [output.get("text", "") for output in cell.outputs]
        texts += [str(value) for output in cell.outputs
                  for value in output.get("data", {}).values()]
        if any(INCORRECT in text for text in texts):
            found.append((number, f"'{INCORRECT}' before the learner did anything wrong"))
        for character, name in CONTROL_CHARACTERS.items():
            if any(character in output.get("text", "") for output in cell.outputs):
                found.append((number, f"{name} in its printed text (a progress bar? use "
                                      "verbose=2 or 0)"))
    return found


def insert_after(notebook, inserted):
    """Inserts code cells into ``notebook``: ``inserted`` maps the index of a
    cell (from 0, over all cells, as the notebook is stored) to the sources of
    the code cells to put after it, in order."""
    for index in sorted(inserted, reverse=True):  # from the end: earlier indices stay valid
        if not 0 <= index < len(notebook.cells):
            raise ValueError(f"`inserted` must name cells of the notebook (0 to "
                             f"{len(notebook.cells) - 1}). Received: index {index}")
        notebook.cells[index + 1:index + 1] = [nbformat.v4.new_code_cell(source)
                                               for source in inserted[index]]


def run_lesson(path, timeout=240, executed=None, inserted=None):
    """Executes a copy of the notebook in a newcomer's kernel; returns a LessonRun.

    Args:
        path: the lesson's notebook; it is read, never written.
        timeout: seconds any one cell may run.
        executed: a list that receives the executed notebook (the memory probe's
            cell removed), for a caller that saves it; None keeps nothing.
        inserted: code cells to run too, as ``insert_after`` takes them (a
            learner's solutions after the exercise cells); None runs the lesson
            as stored. Code cell numbers in ``LessonRun.red`` count them.
    """
    notebook = nbformat.read(path, as_version=4)
    insert_after(notebook, inserted or {})
    notebook.cells.append(nbformat.v4.new_code_cell(PEAK_PROBE))
    # No widget state in the executed copy: with it, a page that cannot run the widgets'
    # JavaScript (nbconvert's HTML offline, nbviewer, GitHub) shows the widget's empty
    # placeholder; without it, each widget's static picture, which gaviz's widgets put in the
    # same output (issue #41).
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", store_widget_state=False,
        resources={"metadata": {"path": str(pathlib.Path(path).parent)}},
    )
    start = time.perf_counter()
    client.execute(env=newcomer_env())
    seconds = time.perf_counter() - start
    text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    if executed is not None:
        notebook.cells.pop()  # the probe is the runner's, not the lesson's
        executed.append(notebook)
    return LessonRun(seconds, peak_mib(text), red_outputs(notebook), misleading_outputs(notebook))


def save_executed(notebook, path, folder):
    """Writes an executed lesson as folder/<the lesson's file name>, atomically:
    a run interrupted midway leaves no half-written copy for `make docs` to take."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / pathlib.Path(path).name
    partial = target.with_suffix(".partial")
    nbformat.write(notebook, partial)
    partial.replace(target)
    return target


def main(arguments):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="lessons to run (default: every lesson)")
    parser.add_argument("--save", metavar="DIR", default=os.environ.get(SAVE_ENV),
                        help=f"write each passing lesson, executed, to DIR (default: ${SAVE_ENV})")
    options = parser.parse_args(arguments)
    paths = [pathlib.Path(p) for p in options.paths] or lesson_paths()
    failed = 0
    for path in paths:
        executed, found = [], ["not run"]
        try:
            run = run_lesson(path, executed=executed)
            print(f"{path.name}: {run.seconds:.1f} s, peak {run.peak_mib:.0f} MiB", flush=True)
            found = faults(path.name, run)
            for fault in found:
                print(f"FAILED {fault}", flush=True)
        except Exception as error:  # noqa: BLE001 - report every lesson, then fail
            print(f"{path.name}: FAILED {type(error).__name__}: {str(error)[:2000]}", flush=True)
        failed += bool(found)
        if options.save and found:  # the site shows no failing lesson, nor an older copy
            (pathlib.Path(options.save) / path.name).unlink(missing_ok=True)
        elif options.save:
            save_executed(executed[0], path, options.save)
    print(f"{len(paths) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
