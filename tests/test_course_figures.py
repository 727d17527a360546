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
