"""The documentation site `make docs` builds, opened in headless Chromium.

The site is served from 127.0.0.1 (a local HTTP server on a free port); every
request elsewhere is refused, so nothing here needs the network. Checked: each
lesson page shows every figure its executed notebook holds (images that
loaded: naturalWidth > 0); the API page documents AccumulationTrainer.fit, its
signature and its docstring; every relative link and image of every page
leads to a file of the site, and every #fragment to an element of that page.

The site shows the lessons as `make binder-check` executed them, and `make
test` runs before that: so these tests run on a built site named by
GAVIZ_DOCS_SITE, which `make docs-check` sets (as .ci/run does, after
binder-check), and are skipped without it. The tests at the end (the link
checker itself, and what lesson_runner saves for the site) run everywhere.
"""

import functools
import html.parser
import http.server
import json
import os
import pathlib
import threading
import urllib.parse

import lesson_runner
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = os.environ.get("GAVIZ_DOCS_SITE")
# The notebooks Sphinx rendered: docs/conf.py copies the executed lessons there.
RENDERED_LESSONS = ROOT / "docs" / "lessons"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")

needs_site = pytest.mark.skipif(
    not SITE, reason="the docs site is tested by `make docs-check` (GAVIZ_DOCS_SITE), "
                     "after `make binder-check` has executed the lessons")


@pytest.fixture(scope="module")
def site():
    path = (ROOT / SITE).resolve()
    assert (path / "index.html").is_file(), f"no built site in {path}: run `make docs`"
    return path


@pytest.fixture(scope="module")
def served(site):
    """The site's URL, served by a local HTTP server for as long as the module runs."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def page(served):
    from playwright.sync_api import sync_playwright
    from test_dashboard_in_jupyterlab import CHROMIUM, FLAGS  # skips, or fails in CI, without Chromium

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            # Offline: only the local server answers (the lessons' Binder and Colab
            # badges are images from elsewhere, and do not load here).
            page.route("**/*", lambda route: route.continue_()
                       if route.request.url.startswith(served) else route.abort())
            yield page
        finally:
            browser.close()


def figures_in(notebook):
    """How many figures an executed notebook's outputs show on the site: an
    image output, or the images inside an HTML output (which the site renders
    before an image: a widget's saved picture, for one)."""
    return sum(_figures(output.get("data", {}))
               for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.outputs)


def _figures(data) -> int:
    if "text/html" in data:
        return data["text/html"].count("<img")
    return int(any(kind in data for kind in IMAGE_TYPES))


def lesson_names():
    return [path.stem for path in lesson_runner.lesson_paths()]


@needs_site
@pytest.mark.parametrize("name", lesson_names())
def test_a_lesson_page_shows_its_figures(page, served, name):
    rendered = nbformat.read(RENDERED_LESSONS / f"{name}.ipynb", as_version=4)
    code = [cell for cell in rendered.cells if cell.cell_type == "code"]
    not_run = [number for number, cell in enumerate(code, start=1) if cell.execution_count is None]
    assert not not_run, f"{name}: the site shows code cells {not_run} unexecuted"
    page.goto(f"{served}/lessons/{name}.html", wait_until="load")
    images = page.locator(".cell_output img")
    loaded = images.evaluate_all("imgs => imgs.map(i => i.complete && i.naturalWidth > 0)")
    assert loaded.count(True) == len(loaded), f"{name}: figures that did not load: {loaded}"
    assert len(loaded) == figures_in(rendered), (
        f"{name}: {len(loaded)} figures on the page, {figures_in(rendered)} in its notebook")


@needs_site
def test_the_lessons_have_figures():
    """The pages' figures come from executed lessons: a lesson rendered without
    outputs would have none, and so pass the test above."""
    counts = {name: figures_in(nbformat.read(RENDERED_LESSONS / f"{name}.ipynb", as_version=4))
              for name in lesson_names()}
    assert counts["01_why_accumulate"] >= 1 and counts["04_pitfall_missing_reset"] >= 1, counts


@needs_site
def test_the_api_page_documents_fit(page, served):
    page.goto(f"{served}/api.html", wait_until="load")
    signature = page.locator('[id="gaviz.AccumulationTrainer.fit"]')
    signature.wait_for(timeout=10_000)
    text = signature.inner_text()
    assert "fit(" in text and "batch_size" in text and "epochs" in text, text
    body = page.locator('dl:has(> dt[id="gaviz.AccumulationTrainer.fit"]) > dd').first.inner_text()
    assert "one update per window of micro-batches" in body, body[:500]
    assert "NonFiniteUpdate" in body and "on_update" in body, body[:500]


class _Links(html.parser.HTMLParser):
    """The ids of a page, and the targets of its links and images."""

    def __init__(self):
        super().__init__()
        self.ids, self.targets = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for name in ("href", "src"):
            if attrs.get(name) and not (tag == "link" and attrs.get("rel") == "preconnect"):
                self.targets.append(attrs[name])


def page_links(path):
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def site_pages(site):
    """The site's pages: not the theme's template macros in _static/."""
    return [path for path in site.rglob("*.html") if "_static" not in path.relative_to(site).parts]


def broken_links(site):
    """Every relative link or image, of every page, whose file is missing or whose
    #fragment names no element of its page, as 'page: target'."""
    pages = {path: page_links(path) for path in site_pages(site)}
    broken = []
    for path, links in pages.items():
        for target in links.targets:
            parts = urllib.parse.urlsplit(target)
            if parts.scheme or parts.netloc:
                continue  # elsewhere: not the site's to check offline
            file = (path.parent / urllib.parse.unquote(parts.path)).resolve() if parts.path else path
            if file.is_dir():
                file = file / "index.html"
            if not file.is_file() or site not in file.parents:
                broken.append(f"{path.relative_to(site)}: {target}")
            elif parts.fragment and file.suffix == ".html":
                ids = pages[file].ids if file in pages else page_links(file).ids
                if urllib.parse.unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {target} (no such id)")
    return broken


@needs_site
def test_no_internal_link_is_broken(site):
    assert len(site_pages(site)) > 20
    assert broken_links(site) == []


def test_broken_links_are_found(tmp_path):
    (tmp_path / "index.html").write_text(
        '<a id="top" href="#top">up</a><a href="guide.html#what">guide</a>'
        '<a href="gone.html">gone</a><img src="_images/missing.png">'
        '<a href="https://example.org/">elsewhere</a>')
    (tmp_path / "guide.html").write_text('<h1 id="why">why</h1><a href="index.html#top">back</a>')
    assert sorted(broken_links(tmp_path)) == [
        "index.html: _images/missing.png", "index.html: gone.html",
        "index.html: guide.html#what (no such id)"]


def test_the_runner_saves_executed_lessons_without_its_probe(tmp_path):
    """What `make binder-check` leaves for the site: the lesson with its outputs,
    and not the memory probe lesson_runner appends."""
    lesson = tmp_path / "lessons" / "00_tiny.ipynb"
    lesson.parent.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, lesson)
    assert lesson_runner.main(["--save", str(tmp_path / "executed"), str(lesson)]) == 0
    saved = nbformat.read(tmp_path / "executed" / lesson.name, as_version=4)
    assert len(saved.cells) == 1 and saved.cells[0].outputs[0].text == "42\n"
    assert json.loads(lesson.read_text())["cells"][0]["outputs"] == []  # the lesson untouched


def test_a_failing_lesson_leaves_no_copy_for_the_site(tmp_path):
    lesson = tmp_path / "00_broken.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]), lesson)
    old_copy = tmp_path / "executed" / lesson.name
    old_copy.parent.mkdir()
    old_copy.write_text("{}")  # from an earlier run that passed
    assert lesson_runner.main(["--save", str(old_copy.parent), str(lesson)]) == 1
    assert not old_copy.exists()
