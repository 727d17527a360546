"""gaviz.course.figures: log axes labelled in plain numbers a reader can read."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from gaviz.course.figures import readable_log_axis  # noqa: E402


def _labels(low, high):
    fig, ax = plt.subplots()
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    readable_log_axis(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high]
    minor = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    plt.close(fig)
    return labels, minor


def test_a_narrow_log_axis_gets_several_plain_labels():
    labels, minor = _labels(1.8, 2.7)  # matplotlib alone labels only "2"
    assert len(labels) >= 3 and all("10" not in text and "^" not in text for text in labels)
    assert minor == []


def test_a_wide_log_axis_is_labelled_at_1_2_5_in_plain_numbers():
    labels, _ = _labels(0.01, 100)
    assert {"0.01", "0.1", "1", "10", "100", "2", "5"} <= set(labels), labels


def test_only_x_or_y():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match='`which` must be "x" or "y". Received: which=\'z\''):
        readable_log_axis(ax, "z")
    plt.close(fig)


# ------------------------------------------------------------ gaviz's own figures


def readable(ax, name):
    """Fails unless ``ax`` has a title (its own or its figure's) and two or more
    labelled ticks on each axis, in plain numbers (no "10^", no "x10")."""
    ax.figure.canvas.draw()
    title = ax.get_title() or (ax.figure._suptitle.get_text() if ax.figure._suptitle else "")
    assert title, f"{name}: no title"
    for axis, (low, high) in [("x", sorted(ax.get_xlim())), ("y", sorted(ax.get_ylim()))]:
        ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
        shown = [t.get_text() for t in ticks
                 if t.get_text() and low <= t.get_position()[axis == "y"] <= high]
        assert len(shown) >= 2, f"{name}: {axis} axis labels {shown}"
        assert not any("^" in text or "times" in text for text in shown), (name, shown)


def _history(losses):
    from gaviz.training.fit.history import History, Update

    return History([Update(update=i + 1, epoch=1, loss=loss, samples=64,
                           micro_steps=4, samples_seen=64 * (i + 1), seconds=0.1 * i)
                    for i, loss in enumerate(losses)])


NARROW = [2.6, 1.8, 2.4, 2.1, 2.2, 1.9]  # matplotlib alone labels one y tick, "2"


def test_plot_histories_is_readable():
    from gaviz.plotting import plot_histories

    ax = plot_histories([_history(NARROW), _history(NARROW[::-1])], ["k=1", "k=4"])
    readable(ax, "plot_histories")
    plt.close(ax.figure)


def test_the_live_curve_figure_is_readable_as_it_grows():
    from gaviz.plotting import CurveFigure

    figure = CurveFigure(title="live")
    readable(figure.ax, "CurveFigure with no line yet")
    for end in (2, len(NARROW)):
        figure.update("k=4", _history(NARROW[:end]))
        readable(figure.ax, f"CurveFigure after {end} updates")


def test_a_comparison_plot_is_readable_and_names_the_pitfall_as_the_lessons_do():
    import numpy as np

    from gaviz.gallery.measure import RunTrace, compare_runs

    def trace(losses, step):
        weights = np.cumsum([(0.0, 0.0)] + [step] * len(losses), axis=0)
        return RunTrace(losses=list(losses), weights=list(weights))

    comparison = compare_runs("MissingReset", trace(NARROW, (3, 5)), trace(NARROW[::-1], (3, 4)))
    figure = comparison.plot()
    for ax in figure.axes:
        readable(ax, "Comparison.plot")
    legend = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert legend == ["exact", "missing_reset"]
    assert figure._suptitle.get_text().startswith("missing_reset: ")
    plt.close(figure)
