"""The demo comparison, its plot and the headless command line."""

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from gaviz import demo
from gaviz.plotting import curve, plot_histories
from gaviz.widgets.compare import batch_sizes, compare_steps, format_table


def test_demo_data_is_deterministic():
    x1, y1 = demo.make_data(256, seed=3)
    x2, y2 = demo.make_data(256, seed=3)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (256, 8) and y1.shape == (256, 1)
    assert not np.array_equal(demo.make_data(256, seed=4)[0], x1)


def test_batch_sizes_hold_one_or_the_other():
    assert batch_sizes([1, 2, 8], "effective", 256, 32) == [(256, 256), (128, 256), (32, 256)]
    assert batch_sizes([1, 2, 8], "micro", 256, 32) == [(32, 32), (32, 64), (32, 256)]
    with pytest.raises(ValueError, match="divisible"):
        batch_sizes([3], "effective", 256, 32)
    with pytest.raises(ValueError, match="`hold`"):
        batch_sizes([1], "both", 256, 32)


def test_same_effective_batch_gives_the_same_curve():
    runs = compare_steps([1, 4], hold="effective", effective_batch_size=64, epochs=2, samples=320)
    assert [r.micro_batch_size for r in runs] == [64, 16]
    assert len(runs[0].history) == len(runs[1].history) == 10
    np.testing.assert_allclose(runs[0].history.loss, runs[1].history.loss, rtol=1e-5)
    assert runs[0].history.loss[-1] < runs[0].history.loss[0]


def test_plot_lines_carry_the_history():
    runs = compare_steps([1, 2], hold="micro", micro_batch_size=32, epochs=1, samples=256)
    ax = plot_histories([r.history for r in runs], [r.label for r in runs], x_axis="updates")
    for line, run in zip(ax.get_lines(), runs):
        xs, ys = curve(run.history, "updates")
        np.testing.assert_array_equal(line.get_xdata(), xs)
        np.testing.assert_array_equal(line.get_ydata(), ys)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [r.label for r in runs]
    table = format_table(runs)
    assert "k=" not in table and table.count("\n") == 3


def test_command_line_writes_figure_and_table(tmp_path):
    out = tmp_path / "curves.png"
    result = subprocess.run(
        [sys.executable, "-m", "gaviz", "compare", "--steps", "1", "2", "--epochs", "1",
         "--samples", "512", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "same effective batch (256)" in result.stdout
    assert "same micro-batch (32)" in result.stdout


def test_command_line_reports_bad_arguments(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gaviz", "compare", "--steps", "3", "--out", str(tmp_path / "c.png")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2
    assert "divisible" in result.stderr
