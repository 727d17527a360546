"""A newcomer's first look at the lessons, in a real JupyterLab in headless Chromium.

JupyterLab runs from this environment with its settings as `make lab` leaves
them (binder/overrides.json, installed by binder/postBuild), on a copy of
lessons/. Checked: no news prompt covers the lesson; every lesson opens
without the unsaved-changes dot; the welcome lesson's first cell shows no red
output. Skipped like test_dashboard_in_jupyterlab.py where Chromium or
Playwright is missing, unless GAVIZ_REQUIRE_BROWSER is set.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from test_dashboard_in_jupyterlab import CHROMIUM, FLAGS, free_port

from playwright.sync_api import expect, sync_playwright  # noqa: E402  (after the skip above)

LESSONS = pathlib.Path(__file__).resolve().parents[2] / "lessons"
NEWS = "official Jupyter news"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'


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
    port = free_port()
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ip=127.0.0.1", "--ServerApp.token=", "--ServerApp.password=", "--allow-root",
         f"--ServerApp.root_dir={root}",
         "--ServerApp.disable_check_xsrf=True"],  # lets the test shut kernels down by REST
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not start:\n" + (tmp_path / "lab.log").read_text()[-2000:])
        yield url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


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


def shut_down_kernels(url):
    with urllib.request.urlopen(f"{url}/api/kernels", timeout=10) as response:
        kernels = json.load(response)
    for kernel in kernels:
        request = urllib.request.Request(f"{url}/api/kernels/{kernel['id']}", method="DELETE")
        urllib.request.urlopen(request, timeout=30)


def test_lessons_open_clean_and_start_quiet(lab):
    names = sorted(p.name for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            open_lesson(page, lab, names[0])
            assert_not_modified(page, names[0])
            # The news question is asked as JupyterLab starts; it is settled by now.
            expect(page.get_by_text(NEWS)).to_have_count(0)

            run_first_code_cell(page)
            cell = page.locator(".jp-Notebook .jp-CodeCell").first
            expect(cell.locator(".jp-OutputArea-output").first).to_contain_text(
                "gaviz", timeout=180_000)
            page.wait_for_timeout(2_000)  # stderr travels apart from stdout
            assert cell.locator(STDERR).count() == 0, cell.locator(STDERR).all_inner_texts()
            shut_down_kernels(lab)

            for name in names[1:]:
                open_lesson(page, lab, name)
                assert_not_modified(page, name)
                shut_down_kernels(lab)
        finally:
            browser.close()


def run_first_code_cell(page):
    """Runs the first code cell (the lesson opens on Markdown); retries as
    test_dashboard_in_jupyterlab.run_first_cell does."""
    editor = page.locator(".jp-Notebook .jp-CodeCell .cm-content").first
    editor.scroll_into_view_if_needed()
    prompt = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").first
    for _ in range(4):
        editor.click()
        page.keyboard.press("Control+Enter")
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=15_000)
            return
        except AssertionError:
            continue
    raise AssertionError("JupyterLab never ran the cell in 4 attempts")
