"""Drawing loss curves from plain records (no display needed): gaviz's
per-update histories, and the batch and epoch logs Keras gives its callbacks."""

from __future__ import annotations

import math

from gaviz.checks import check_one_of

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
    :mod:`gaviz.keraslog`). Epochs are separated by a nan, which matplotlib
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
    """Labels, grid and scale shared by every loss-curve plot in gaviz."""
    ax.set_xlabel(X_AXES[x_axis][0])
    ax.set_ylabel(EFFECTIVE_LOSS)
    ax.set_yscale("log" if log else "linear")
    if log:
        from matplotlib.ticker import FuncFormatter

        # Plain numbers (0.5, not 5x10^-1), and between decades only 2 and 5
        # (all nine minor labels would pile up).
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(_two_and_five))
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)


def _two_and_five(value, _):
    import math

    if value <= 0:
        return ""
    leading = round(value / 10 ** math.floor(math.log10(value)))
    return f"{value:g}" if leading in (2, 5) else ""


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
    style_axes(ax, x_axis, title, log=all(y > 0 for h in histories for y in h.loss))
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
        self.ax.relim()
        self.ax.autoscale_view()

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
        self.ax.relim()
        self.ax.autoscale_view()

    def label_axes(self, x_label: str, y_label: str) -> None:
        self.ax.set_xlabel(x_label)
        self.ax.set_ylabel(y_label)

    def png(self) -> bytes:
        import io

        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()
