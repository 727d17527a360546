"""Drawing effective-batch loss curves from plain histories (no display needed)."""

from __future__ import annotations

X_AXES = {
    "updates": ("optimizer updates", lambda h: list(range(1, len(h) + 1))),
    "samples": ("samples seen", lambda h: h.samples_seen),
    "seconds": ("seconds", lambda h: h.seconds),
}


def curve(history, x_axis: str = "samples"):
    """``(xs, ys)``: one point per update, the update's effective-batch loss."""
    if x_axis not in X_AXES:
        raise ValueError(f"`x_axis` must be one of {sorted(X_AXES)}. Received: x_axis={x_axis!r}")
    return X_AXES[x_axis][1](history), history.loss


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
    for history, label in zip(histories, labels):
        xs, ys = curve(history, x_axis)
        ax.plot(xs, ys, label=label, linewidth=1.4)
    ax.set_xlabel(X_AXES[x_axis][0])
    ax.set_ylabel("effective-batch loss")
    if all(y > 0 for h in histories for y in h.loss):
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return ax
