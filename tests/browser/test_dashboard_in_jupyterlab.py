"""The dashboard in a real JupyterLab, in headless Chromium (Debian's build).

Starts `jupyter lab` on a free 127.0.0.1 port with a temporary root holding
one notebook, runs its cell, changes the accumulation steps, clicks Run,
waits for the curves, and saves a screenshot. Skipped where Chromium or
Playwright is missing, unless GAVIZ_REQUIRE_BROWSER is set (as .ci/run does).
"""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT = pathlib.Path(__file__).with_name("dashboard.png")


def _requirements():
    missing = []
    if not CHROMIUM:
        missing.append("chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright")
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        missing.append("jupyterlab")
    return missing


MISSING = _requirements()
if MISSING:
    if os.environ.get("GAVIZ_REQUIRE_BROWSER"):
        raise RuntimeError(f"browser test needs {MISSING}; .ci/run installs them")
    pytest.skip(f"browser test needs {MISSING}", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

NOTEBOOK = {
    "cells": [{
        "cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
        "source": "import gaviz\nboard = gaviz.dashboard(preset='small', epochs=2, steps=(1, 2))\nboard",
    }],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_lab(root, log_path, options, env):
    """Runs JupyterLab on ``root`` on a free port; yields its URL, then stops it."""
    port = free_port()
    log = open(log_path, "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ip=127.0.0.1", "--ServerApp.token=", "--ServerApp.password=", "--allow-root",
         f"--ServerApp.root_dir={root}", *options],
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
            pytest.fail("jupyter lab did not start:\n" + log_path.read_text()[-2000:])
        yield url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture
def lab(tmp_path):
    (tmp_path / "dashboard.ipynb").write_text(json.dumps(NOTEBOOK))
    yield from serve_lab(
        tmp_path, tmp_path / "lab.log",
        ["--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )


def run_first_cell(page, editor, attempts=4):
    """Runs the first cell; retries when JupyterLab drops the request.

    Seen in CI: "Idle" shows while the notebook is still connecting to its
    kernel, and Shift+Enter then only moves to the next cell (the prompt
    stays "[ ]:"). A started cell shows "[*]:" or a number.
    """
    prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
    for _ in range(attempts):
        editor.click()
        page.keyboard.press("Control+Enter")  # run in place, no new cell
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=15_000)
            return
        except AssertionError:
            continue
    raise AssertionError(f"JupyterLab never ran the cell in {attempts} attempts")


def test_dashboard_runs_in_jupyterlab(lab):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1300})
            page.goto(f"{lab}/lab/tree/dashboard.ipynb")
            editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
            editor.wait_for(timeout=90_000)
            # Run the cell once the kernel is up (a cell run while the kernel
            # starts can be lost), then wait for the widget: kernel start and
            # the TensorFlow import take a while on a busy 2-core machine.
            expect(page.locator(".jp-Notebook-ExecutionIndicator, #jp-main-statusbar")
                   .first).to_contain_text("Idle", timeout=120_000)
            run_first_cell(page, editor)
            run = page.locator("button.gaviz-run")
            try:
                run.wait_for(timeout=180_000)
            except Exception:
                page.screenshot(path=str(SCREENSHOT.with_name("dashboard-failed.png")), full_page=True)
                raise AssertionError(
                    "the dashboard did not appear; page text:\n" + page.inner_text("body")[-3000:]
                ) from None
            image = page.locator("img.gaviz-plot")
            # No broken-image icon before a run: the plot is hidden until drawn. Holding
            # the effective batch decides the micro-batch, so its box takes no typing.
            expect(image).to_be_hidden()
            expect(page.locator(".gaviz-micro-batch input")).to_be_disabled()
            page.locator(".gaviz-steps select").select_option(label=["1", "4"])
            expect(page.locator(".gaviz-plan")).to_contain_text("k=4", timeout=10_000)
            before = image.get_attribute("src") or ""

            run.click()
            status = page.locator(".gaviz-status")
            expect(status).to_contain_text("finished", timeout=120_000)
            expect(page.locator(".gaviz-summary tr")).to_have_count(3)
            after = image.get_attribute("src") or ""
            assert after and after != before, "the plot did not change"
            # The rendered plot is a real image with content.
            box = image.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 150
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 10_000
