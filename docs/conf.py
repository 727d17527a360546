"""Sphinx configuration of gaviz's documentation site (built by `make docs`).

The site is built offline, with warnings as errors (`sphinx-build -W -n`):
no intersphinx inventories are fetched, so references to Keras, TensorFlow,
NumPy and the like are left as plain text (NITPICK_OUTSIDE below) while every
reference inside the project must resolve. The lessons are rendered from the
copies `tests/lesson_runner.py --save` executed (`make binder-check` writes them,
`make docs` runs only the lessons without an up-to-date copy); Sphinx never
executes a notebook (nb_execution_mode = "off"). CONTRIBUTING.md says why and how.
"""

import os
import pathlib
import shutil
import subprocess
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
#: Where the executed lessons are (the Makefile passes the same folder).
EXECUTED_LESSONS = pathlib.Path(os.environ.get("GAVIZ_EXECUTED_LESSONS", ROOT / "build" / "executed-lessons"))
#: Where Sphinx reads them: copied into the source tree, ignored by git.
RENDERED_LESSONS = DOCS / "lessons"

sys.path.insert(0, str(ROOT))  # document this checkout's gaviz, not an installed one
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

project = "gaviz"
author = "the gaviz authors"
copyright = "the gaviz authors, Apache-2.0"

extensions = [
    "myst_nb",  # Markdown (MyST) pages and notebooks; loads myst_parser itself
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # gaviz's docstrings are Google style
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "lessons/solutions"]
root_doc = "index"

# Notebooks: rendered as executed by tests/lesson_runner.py, never executed here.
nb_execution_mode = "off"
nb_execution_raise_on_error = True
# Widgets (lesson 12's dashboard) render as their static text: the ipywidgets
# JavaScript would come from a CDN, and a built page must work offline.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_output_stderr = "show"
myst_enable_extensions = ["colon_fence", "substitution"]  # no math: MathJax would come from a CDN


def last_changed(path):
    """The date of the last commit that changed ``path`` (YYYY-MM-DD), or a note
    saying there is none (a copy of the project outside git)."""
    try:
        date = subprocess.run(["git", "log", "-1", "--format=%cs", "--", path], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        date = ""
    return date or "an unknown date (no git history here)"


myst_substitutions = {"benchmarks_date": last_changed("benchmarks/results.md")}
myst_heading_anchors = 3  # links to a guide section by its title's slug

# API reference from the docstrings.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Subclassing"]  # the trainer's rule, as written

# Everything inside the project must resolve (-n); names from other projects cannot
# be resolved offline (no intersphinx), so they are rendered as plain text.
nitpicky = True
NITPICK_OUTSIDE = ["keras", "tf", "tensorflow", "np", "numpy", "matplotlib", "ipywidgets",
                   "traitlets", "collections", "typing", "pathlib", "concurrent"]
nitpick_ignore_regex = [("py:.*", rf"{name}(\..*)?") for name in NITPICK_OUTSIDE]

html_theme = "sphinx_book_theme"
html_title = "gaviz"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "search_bar_text": "Search the docs",
}
html_static_path = []
html_last_updated_fmt = None


def copy_executed_lessons(app):
    """Puts the executed lessons where Sphinx reads them, before it looks for documents."""
    lessons = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
    missing = [p.name for p in lessons if not (EXECUTED_LESSONS / p.name).exists()]
    if missing:
        raise RuntimeError(f"no executed copy of {missing} in {EXECUTED_LESSONS}: build the site "
                           "with `make docs`, which executes the lessons that lack one")
    for old in RENDERED_LESSONS.glob("*.ipynb"):
        old.unlink()
    for lesson in lessons:
        shutil.copy2(EXECUTED_LESSONS / lesson.name, RENDERED_LESSONS / lesson.name)


class ProseAttributeDocstrings:
    """Keeps napoleon from reading an attribute's docstring as ``type: description``.

    Napoleon (Google style) takes the text before the first colon of an
    attribute's or property's docstring as its type; gaviz's attribute
    docstrings are prose ("Peak above the baseline: ..."), so they are restored
    as written after napoleon has run.
    """

    KINDS = {"attribute", "property", "data"}

    def __init__(self):
        self.written = {}

    def before_napoleon(self, app, what, name, obj, options, lines):
        if what in self.KINDS:
            self.written[name] = list(lines)

    def after_napoleon(self, app, what, name, obj, options, lines):
        if what in self.KINDS and name in self.written:
            lines[:] = self.written.pop(name)


GALLERY_TABLE = DOCS / "guide" / "gallery_table.inc"


def write_gallery_table(app):
    """The pitfalls page's table, from the gallery's records (gaviz.gallery.pitfalls.GALLERY):
    the one place a pitfall is described."""
    from gaviz.gallery import pitfalls

    rows = ["| name | the mistake | how it shows (tested) | lesson |", "| --- | --- | --- | --- |"]
    for p in pitfalls.GALLERY:
        lesson = f"[{p.lesson[:2]}](../lessons/{p.lesson}.ipynb)"
        rows.append(f"| `{p.name}` | {p.summary} | {p.detect} | {lesson} |")
    GALLERY_TABLE.write_text("\n".join(rows) + "\n")


def setup(app):
    app.connect("builder-inited", copy_executed_lessons)
    app.connect("builder-inited", write_gallery_table)
    prose = ProseAttributeDocstrings()
    app.connect("autodoc-process-docstring", prose.before_napoleon, priority=400)
    app.connect("autodoc-process-docstring", prose.after_napoleon, priority=600)
