"""A newcomer's first look at the lessons, in a real JupyterLab in headless Chromium.

JupyterLab runs from this environment with its settings as `make lab` leaves
them (binder/overrides.json, installed by binder/postBuild), on a copy of
lessons/. Checked: no news prompt covers the lesson; every lesson opens
without the unsaved-changes dot; every lesson, run top to bottom (Run All
Cells), shows no red output box (stderr or an error), no widget that
failed to display and no "✗ Incorrect", and its kernel peaks under Binder's memory. This walk is
make test's run of the lessons: where it is collected, tests/conftest.py skips
test_lessons.py's nbclient runs, which check the same. Skipped like test_dashboard_in_jupyterlab.py where
Chromium or Playwright is missing, unless GAVIZ_REQUIRE_BROWSER is set.
"""

import json
import os
import pathlib
import shutil
import time
import urllib.request

import pytest
from lesson_runner import INCORRECT, LessonRun, faults, process_peak_mib
from playwright.sync_api import expect, sync_playwright  # noqa: E402  (after the skip above)
from test_dashboard_in_jupyterlab import CHROMIUM, FLAGS, serve_lab

LESSONS = pathlib.Path(__file__).resolve().parents[2] / "lessons"
NEWS = "official Jupyter news"
# JupyterLab shows stderr and errors (tracebacks) in red, with this MIME type.
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
# Every code cell of the open notebook; JupyterLab's default windowing
# ("contentVisibility") keeps all of them, outputs included, in the page; their
# text is read with textContent (innerText is empty for cells scrolled out of view).
CODE_CELLS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell"
WIDGET_ERROR = "Error displaying widget"


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "lessons"
    shutil.copytree(LESSONS, root)
    # A newcomer's shell: no TensorFlow log level, no user settings or workspace of ours,
    # and no PYTEST_CURRENT_TEST, under which ipykernel keeps file descriptor 2 from the page.
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    for name in ("TF_CPP_MIN_LOG_LEVEL", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    yield from serve_lab(
        root, tmp_path / "lab.log",
        ["--ServerApp.disable_check_xsrf=True"],  # lets the test shut kernels down by REST
        env,
    )


def open_lesson(page, url, name):
    """Opens a lesson and waits for its kernel to be idle: JupyterLab has then
    written the kernel's metadata into the notebook."""
    page.goto(f"{url}/lab/tree/{name}?reset")  # a fresh workspace: this lesson alone
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
    expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=120_000)


def assert_not_modified(page, name, seconds=6):
    """The tab shows no unsaved-changes dot for a while after the kernel is idle (the
    kernel's metadata lands about then; a dot while the page loads comes and goes)."""
    tab = page.locator(".lm-DockPanel .lm-TabBar-tab.jp-mod-current")
    expect(tab).to_have_count(1)
    for _ in range(seconds * 4):
        assert "jp-mod-dirty" not in (tab.get_attribute("class") or ""), (
            f"{name} is marked modified as soon as it opens")
        page.wait_for_timeout(250)


def kernel_ids(url):
    with urllib.request.urlopen(f"{url}/api/kernels", timeout=10) as response:
        return [kernel["id"] for kernel in json.load(response)]


def kernel_peak_mib(url):
    """The largest peak resident memory among the server's running kernels: each
    kernel process names its connection file, kernel-<id>.json, on its command line."""
    names = [f"kernel-{kernel}.json".encode() for kernel in kernel_ids(url)]
    peaks = []
    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if any(name in cmdline.read_bytes() for name in names):
                peaks.append(process_peak_mib(cmdline.parent.name))
        except OSError:  # the process ended while we looked
            continue
    assert peaks, f"no kernel process found for {names}"
    return max(peaks)


def shut_down_kernels(url):
    for kernel in kernel_ids(url):
        request = urllib.request.Request(f"{url}/api/kernels/{kernel}", method="DELETE")
        urllib.request.urlopen(request, timeout=30)


def test_lessons_open_clean_and_run_without_red(lab):
    names = sorted(p.name for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))
    found = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            for number, name in enumerate(names):
                open_lesson(page, lab, name)
                assert_not_modified(page, name)
                if number == 0:
                    # The news question is asked as JupyterLab starts; it is settled by now.
                    expect(page.get_by_text(NEWS)).to_have_count(0)
                start = time.monotonic()
                run_all_cells(page, name)
                run = LessonRun(time.monotonic() - start, kernel_peak_mib(lab), red_boxes(page),
                                incorrect_marks(page))
                print(f"{name}: {run.seconds:.1f} s, peak {run.peak_mib:.0f} MiB", flush=True)
                found += faults(name, run)
                shut_down_kernels(lab)
        finally:
            browser.close()
    assert found == [], "what a newcomer would see go wrong:\n" + "\n".join(found)


def run_all_cells(page, name, timeout=600):
    """Runs the whole lesson from the Run menu and waits until no cell is
    running or queued; fails if a cell did not run (Run All stops at an error)."""
    prompts = page.locator(CODE_CELLS).locator(".jp-InputPrompt")
    first = prompts.first
    for _ in range(4):  # JupyterLab may drop a request made while it connects
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            expect(first).not_to_have_text("[ ]:", timeout=15_000)
            break
        except AssertionError:
            page.keyboard.press("Escape")
    else:
        raise AssertionError(f"JupyterLab never started running {name} in 4 attempts")
    deadline = time.monotonic() + timeout
    while any("*" in text for text in prompts.all_text_contents()):
        assert time.monotonic() < deadline, f"{name} still running after {timeout} s"
        page.wait_for_timeout(1_000)
    page.wait_for_timeout(2_000)  # stderr travels apart from the reply that ends a cell
    texts = prompts.all_text_contents()
    code = sum(c["cell_type"] == "code" for c in json.loads((LESSONS / name).read_text())["cells"])
    # Every cell is in the page, or red_boxes would miss some outputs.
    assert len(texts) == code, f"{name}: {len(texts)} code cells in the page, {code} in the file"
    not_run = [i for i, text in enumerate(texts, start=1) if not text.strip()[1:-2].strip().isdigit()]
    assert not not_run, f"{name}: code cells {not_run} did not run; " + "; ".join(
        f"cell {cell}: {text}" for cell, text in red_boxes(page))


def incorrect_marks(page):
    """(code cell number from 1, what) of each output showing "✗ Incorrect": the
    lesson as shipped has no answer of the learner's to fail."""
    texts = page.locator(CODE_CELLS).evaluate_all(
        "cells => cells.map(cell => cell.querySelector('.jp-OutputArea')?.textContent || '')")
    return [(number, f"'{INCORRECT}' before the learner did anything wrong")
            for number, text in enumerate(texts, start=1) if INCORRECT in text]


def red_boxes(page):
    """(code cell number from 1, text) of each red output box or failed widget."""
    found = []
    cells = page.locator(CODE_CELLS)
    for number in range(1, cells.count() + 1):
        cell = cells.nth(number - 1)
        for text in cell.locator(STDERR).all_text_contents():
            # Whole: a traceback's last lines name the line in gaviz, and an AutoGraph
            # "could not transform" warning before it says why a graph ran as Python.
            found.append((number, text.strip()))
        for text in cell.locator(".jp-OutputArea-output").all_text_contents():
            if WIDGET_ERROR in text:
                found.append((number, text.strip()[:2000]))
    return found
