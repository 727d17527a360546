"""Readable axes for the lessons' figures.

Matplotlib labels a log axis only at powers of ten (and at minor ticks in
scientific notation, "2x10^0"): a loss that stays between 1.8 and 2.7 gets a
single label, "2". :func:`readable_log_axis` labels such an axis in plain
numbers that a reader can read values off.
"""

from __future__ import annotations

#: Below this ratio of the axis's ends, ticks are spaced as on a linear axis.
NARROW_RATIO = 10.0


def _plain(value, _position=None) -> str:
    return f"{value:g}"


def readable_log_axis(ax, which: str = "y") -> None:
    """Labels a log-scaled axis of ``ax`` with plain numbers (``0.5``, ``2``, ``20``).

    A narrow range (its ends less than ten times apart) gets about five evenly
    spaced ticks; a wider one ticks at 1, 2 and 5 times each power of ten.
    Call it after plotting, once the axis's limits are set.

    Args:
        ax: a Matplotlib ``Axes`` whose ``which`` axis is log-scaled.
        which: ``"y"`` or ``"x"``.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    if which not in ("x", "y"):
        raise ValueError(f'`which` must be "x" or "y". Received: which={which!r}')
    axis = ax.yaxis if which == "y" else ax.xaxis
    low, high = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
    if low > 0 and high / low < NARROW_RATIO:
        axis.set_major_locator(MaxNLocator(nbins=5))
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())
