"""LivePlot's renderer, from records made by hand: no training, no display.

Both of LivePlot's modes (``on_update`` and the Keras callback) only record;
one :class:`gaviz.widgets.liveplot.CurveRenderer` draws whichever records there are.
"""

import math
from types import SimpleNamespace

import numpy as np

import gaviz
from gaviz.plotting import CurveFigure
from gaviz.training.fit.history import History, Update
from gaviz.widgets.keraslog import KerasLog
from gaviz.widgets.liveplot import CurveRenderer, keras_lines


def history_of(*losses):
    history = History()
    for i, loss in enumerate(losses, 1):
        history.append(Update(update=i, epoch=1, loss=loss, samples=8,
                              micro_steps=2 * i, samples_seen=8 * i, seconds=0.1 * i))
    return history


def keras_log_of():
    """Two epochs of two batches each (running means), the second with val_loss."""
    log = KerasLog()
    for epoch, (losses, logs) in enumerate([((4.0, 3.0), {"loss": 3.0}),
                                            ((2.0, 1.5), {"loss": 1.5, "val_loss": 1.8})]):
        log.begin_epoch(epoch)
        for batch, loss in enumerate(losses):
            log.end_batch(batch, {"loss": loss}, seconds=1.0 + epoch + batch / 2)
        log.end_epoch(epoch, logs, seconds=1.5 + epoch)
    return log


def renderer(min_interval=0.0, x_axis="samples"):
    return CurveRenderer(CurveFigure(x_axis), SimpleNamespace(value=b""), min_interval)


def test_updates_are_drawn_one_point_each_against_samples():
    draw = renderer()
    assert draw.render("run", history_of(1.0, 0.5, 0.25), KerasLog())
    line = draw.figure.lines["run"]
    np.testing.assert_array_equal(line.get_xdata(), [8, 16, 24])
    np.testing.assert_array_equal(line.get_ydata(), [1.0, 0.5, 0.25])
    assert draw.figure.ax.get_ylabel() == "effective-batch loss"
    assert draw.image.value[:4] == b"\x89PNG"


def test_keras_logs_are_drawn_as_running_means_with_epoch_markers():
    draw = renderer()
    draw.render("fit", History(), keras_log_of())
    running, epoch, val = (draw.figure.lines[key] for key in keras_lines("fit"))
    xs, ys = running.get_xdata(), running.get_ydata()
    assert [x for x in xs if not math.isnan(x)] == [1, 2, 3, 4] and math.isnan(xs[2])
    assert [y for y in ys if not math.isnan(y)] == [4.0, 3.0, 2.0, 1.5]
    assert list(epoch.get_xdata()) == [2, 4] and list(epoch.get_ydata()) == [3.0, 1.5]
    assert list(val.get_xdata()) == [4] and list(val.get_ydata()) == [1.8]
    assert draw.figure.ax.get_xlabel() == "training steps (Keras batches)"


def test_updates_replace_a_keras_curve_drawn_before():
    draw = renderer()
    draw.render("both", History(), keras_log_of())
    assert draw.draws_keras_log("both")
    draw.render("both", history_of(2.0), keras_log_of())
    assert set(draw.figure.lines) == {"both"} and not draw.draws_keras_log("both")


def test_shows_are_throttled_unless_forced():
    draw = renderer(min_interval=1e9)
    assert draw.render("run", history_of(1.0), KerasLog())  # the first at once
    assert not draw.render("run", history_of(1.0, 0.5), KerasLog())
    assert len(draw.figure.lines["run"].get_ydata()) == 1
    assert draw.render("run", history_of(1.0, 0.5), KerasLog(), force=True)
    assert len(draw.figure.lines["run"].get_ydata()) == 2


def test_both_modes_of_live_plot_render_through_its_renderer():
    live = gaviz.LivePlot(label="mine", min_interval=0.0)
    seen = []
    live.renderer.render = lambda label, history, log, force=False: seen.append(
        (label, len(history), len(log), force))
    live.on_epoch_begin(0)
    live.on_train_batch_end(0, {"loss": 2.0})  # the Keras callback
    live(history_of(1.0).updates[0])  # on_update
    live.on_train_end()
    assert seen == [("mine", 0, 1, False), ("mine", 1, 1, False), ("mine", 1, 1, True)]
    assert live.figure is live.renderer.figure and live.image is live.renderer.image
