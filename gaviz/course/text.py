"""Long report lines, wrapped at word boundaries for a notebook's output area.

JupyterLab breaks an output line that is wider than the page anywhere, mid-word
("samp le"); a report printed through :func:`print_wrapped` breaks between words.
"""

from __future__ import annotations

import textwrap

WIDTH = 92  # characters that fit JupyterLab's default output width


def wrapped(text: str, width: int = WIDTH) -> str:
    """``text`` with each line wider than ``width`` broken between words.

    A continued line is indented under the first word after the line's own
    indent and bullet (``"- "``), so a finding's lines read as one item.
    """
    if width < 20:
        raise ValueError(f"`width` must be an integer >= 20. Received: width={width!r}")
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        indent = len(line) - len(stripped) + (2 if stripped.startswith("- ") else 0)
        out.append(textwrap.fill(line, width, subsequent_indent=" " * indent,
                                 break_long_words=False, break_on_hyphens=False) or line)
    return "\n".join(out)


def print_wrapped(text: str, width: int = WIDTH, **print_options) -> None:
    """Prints ``text`` wrapped by :func:`wrapped`; ``print_options`` go to ``print``."""
    print(wrapped(str(text), width), **print_options)
