"""Readable axes for the lessons' figures.

Matplotlib labels a log axis only at powers of ten (and at minor ticks in
scientific notation, "2x10^0"): a loss that stays between 1.8 and 2.7 gets a
single label, "2". :func:`readable_log_axis` labels such an axis in plain
numbers that a reader can read values off. It lives in :mod:`gaviz.plotting`,
whose figures use it too; the lessons import it from here.
"""

from __future__ import annotations

from gaviz.plotting import NARROW_RATIO, readable_log_axis

__all__ = ["NARROW_RATIO", "readable_log_axis"]
