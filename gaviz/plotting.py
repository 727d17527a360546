"""Drawing loss curves from plain records (no display needed): gaviz's
per-update histories, and the batch and epoch logs Keras gives its callbacks."""

from __future__ import annotations

import math

from gaviz._arguments import check_one_of

#: Line styles cycle with the colours, so curves that coincide (exact
#: accumulation at the same effective batch) stay visible on top of each other.
LINE_STYLES = ["-", "--", ":", "-."]

X_AXES = {
    "updates": ("optimizer updates", lambda h: list(range(1, len(h) + 1))),
    "samples": ("samples seen", lambda h: h.samples_seen),
    "seconds": ("seconds", lambda h: h.seconds),
}


def curve(history, x_axis: str = "samples"):
    """``(xs, ys)``: one point per update, the update's effective-batch loss."""
    check_one_of("x_axis", x_axis, X_AXES)
    return X_AXES[x_axis][1](history), history.loss


EFFECTIVE_LOSS = "effective-batch loss"

#: Keras tells callbacks no batch size, so curves of its logs count training
#: steps (batches) unless the x axis is seconds.
KERAS_STEPS = "training steps (Keras batches)"
KERAS_LOSS = "loss as Keras logs it"


def keras_x_label(x_axis: str) -> str:
    return X_AXES["seconds"][0] if x_axis == "seconds" else KERAS_STEPS


def running_mean_curve(log, x_axis: str = "samples"):
    """``(xs, ys)``: Keras's per-batch ``logs["loss"]``, one point per batch.

    Each ``y`` is the running mean over its epoch so far (see
    :mod:`gaviz.widgets.keraslog`). Epochs are separated by a nan, which matplotlib
    draws as a gap: the mean restarts at each epoch, and a line across the
    restart would draw a jump that is the reset, not the training.
    """
    check_one_of("x_axis", x_axis, X_AXES)
    xs, ys = [], []
    for i, record in enumerate(log.batches):
        # A new epoch, or the first epoch of another fit (same epoch number,
        # batch index back to the start).
        previous = log.batches[i - 1] if i else None
        restarted = previous is not None and (record.epoch != previous.epoch
                                              or record.batch <= previous.batch)
        if restarted:
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(_keras_x(record, x_axis))
        ys.append(record.loss)
    return xs, ys


def epoch_points(log, x_axis: str = "samples", key: str = "loss"):
    """``(xs, ys)``: each epoch's ``logs[key]`` (``"loss"`` or ``"val_loss"``)
    at the step where the epoch ended; epochs without it are left out."""
    check_one_of("x_axis", x_axis, X_AXES)
    points = [(_keras_x(r, x_axis), getattr(r, key)) for r in log.epochs]
    points = [(x, y) for x, y in points if not math.isnan(y)]
    return [x for x, _ in points], [y for _, y in points]


def _keras_x(record, x_axis):
    return record.seconds if x_axis == "seconds" else record.step


def style_axes(ax, x_axis: str, title=None, log=True):
    """Labels, grid and scale shared by every loss-curve plot in gaviz; call
    :func:`readable_log_axis` once the curves are drawn."""
    ax.set_xlabel(X_AXES[x_axis][0])
    ax.set_ylabel(EFFECTIVE_LOSS)
    ax.set_yscale("log" if log else "linear")
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)


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


def plot_histories(histories, labels=None, ax=None, x_axis: str = "samples", title=None):
    """Plots one effective-batch loss curve per history on ``ax`` (made if None).

    Args:
        histories: ``gaviz.History`` objects.
        labels: one legend entry per history (default: "run 1", "run 2"...).
        ax: a matplotlib Axes to draw on.
        x_axis: ``"updates"``, ``"samples"`` or ``"seconds"``.
        title: optional Axes title.

    Returns:
        The Axes. Its lines carry exactly ``curve(history, x_axis)``.
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 4))
    labels = labels or [f"run {i + 1}" for i in range(len(histories))]
    for i, (history, label) in enumerate(zip(histories, labels)):
        xs, ys = curve(history, x_axis)
        ax.plot(xs, ys, LINE_STYLES[i % len(LINE_STYLES)], label=label, linewidth=1.6)
    log = all(y > 0 for h in histories for y in h.loss)
    style_axes(ax, x_axis, title or "effective-batch loss of each update", log=log)
    if log:
        readable_log_axis(ax)
    ax.legend(fontsize="small")
    return ax


class CurveFigure:
    """A figure of loss curves updated in place, one line per run, no display needed.

    Lines are created once and updated with ``set_data`` (never redrawn from
    scratch); ``png()`` renders the current state. It uses matplotlib's
    object API, not pyplot, so it is safe to drive from a training thread.
    """

    def __init__(self, x_axis: str = "samples", title=None, size=(7.5, 4.2)):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        check_one_of("x_axis", x_axis, X_AXES)
        self.x_axis = x_axis
        self.figure = Figure(figsize=size, dpi=90)
        FigureCanvasAgg(self.figure)
        self.ax = self.figure.add_subplot()
        style_axes(self.ax, x_axis, title)
        readable_log_axis(self.ax)  # the empty axes too: a new LivePlot shows them
        self.lines = {}

    def update(self, label: str, history) -> None:
        """Shows ``history`` as the line ``label`` (created on first use)."""
        self.set_line(label, *curve(history, self.x_axis))

    def set_line(self, label: str, xs, ys, fmt=None, legend=None, **style) -> None:
        """Shows ``(xs, ys)`` as the line ``label`` (created on first use).

        ``fmt`` and ``style`` (matplotlib's) apply when the line is created;
        ``legend`` is its legend entry (default ``label``). nan in ``ys`` is a gap.
        """
        if label not in self.lines:
            fmt = fmt or LINE_STYLES[len(self.lines) % len(LINE_STYLES)]
            style.setdefault("linewidth", 1.6)
            (self.lines[label],) = self.ax.plot([], [], fmt, label=legend or label, **style)
            self.ax.legend(fontsize="small", loc="upper right")
        self.lines[label].set_data(xs, ys)
        if any(y <= 0 for y in ys):  # nan compares False: gaps do not count
            self.ax.set_yscale("linear")
        self._rescale()

    def _rescale(self) -> None:
        """Fits the axes to the lines; a log axis gets ticks for its new range."""
        self.ax.relim()
        self.ax.autoscale_view()
        if self.ax.get_yscale() == "log":
            readable_log_axis(self.ax)

    def remove(self, label: str) -> None:
        """Takes the line ``label`` off the figure (nothing if it is not there)."""
        line = self.lines.pop(label, None)
        if line is None:
            return
        line.remove()
        if self.lines:
            self.ax.legend(fontsize="small", loc="upper right")
        elif self.ax.get_legend() is not None:
            self.ax.get_legend().remove()
        self._rescale()

    def label_axes(self, x_label: str, y_label: str) -> None:
        self.ax.set_xlabel(x_label)
        self.ax.set_ylabel(y_label)

    def png(self) -> bytes:
        import io

        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()
