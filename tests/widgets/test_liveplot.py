"""gaviz.LivePlot as a Keras callback: plain ``model.fit`` drawn live, headless."""

import io
import math

import keras
import matplotlib.image
import numpy as np
import pytest
import tensorflow as tf
from helpers import make_mlp

import gaviz
from gaviz.plotting import epoch_points, running_mean_curve
from gaviz.widgets.keraslog import KerasLog

BATCH = 16  # 100 samples: 7 batches per epoch, the last one of 4


class Recorder(keras.callbacks.Callback):
    """What Keras passes to a plain callback, to compare the plot against."""

    def __init__(self):
        super().__init__()
        self.batches, self.epochs = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((batch, dict(logs)))

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, dict(logs)))


def compiled_mlp(learning_rate=0.1):
    model = make_mlp()
    model.compile(keras.optimizers.SGD(learning_rate), "mse")
    return model


def without_gaps(values):
    return [v for v in values if not math.isnan(v)]


def png_height(data):
    assert data[:4] == b"\x89PNG"
    return matplotlib.image.imread(io.BytesIO(data), format="png").shape[0]


def test_model_fit_draws_the_batch_logs_keras_passed(regression_data):
    x, y = regression_data
    live, seen = gaviz.LivePlot(label="keras", min_interval=0), Recorder()
    assert isinstance(live, keras.callbacks.Callback)
    history = compiled_mlp().fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False,
                                 validation_data=(x[:20], y[:20]), callbacks=[live, seen])

    # One point per training batch (validation batches add none), its value
    # the logs["loss"] Keras passed, x the step counted over both epochs.
    batches = live.keras_log.batches
    assert len(batches) == len(seen.batches) == 14
    assert [b.loss for b in batches] == [logs["loss"] for _, logs in seen.batches]
    assert [b.batch for b in batches] == [batch for batch, _ in seen.batches]
    assert [b.step for b in batches] == list(range(1, 15))
    assert [b.epoch for b in batches] == [1] * 7 + [2] * 7
    epochs = live.keras_log.epochs
    assert [e.loss for e in epochs] == history.history["loss"]
    assert [e.val_loss for e in epochs] == history.history["val_loss"]
    assert [e.step for e in epochs] == [7, 14]

    # The figure holds exactly those numbers: one segment per epoch, the
    # epoch values as markers where each epoch ended.
    lines = live.figure.lines
    running = lines["keras (Keras running mean)"]
    ys = list(running.get_ydata())
    assert len(ys) == 15 and math.isnan(ys[7])  # a gap where the mean restarts
    assert without_gaps(ys) == [logs["loss"] for _, logs in seen.batches]
    assert without_gaps(running.get_xdata()) == list(range(1, 15))
    np.testing.assert_array_equal(lines["keras (Keras epoch loss)"].get_xdata(), [7, 14])
    np.testing.assert_array_equal(lines["keras (Keras epoch loss)"].get_ydata(),
                                  history.history["loss"])
    np.testing.assert_array_equal(lines["keras (Keras val_loss)"].get_ydata(),
                                  history.history["val_loss"])
    assert "keras" not in lines  # no effective-batch curve: there were no updates

    # Labelled as what it is, not as gaviz's effective-batch loss.
    assert running.get_label() == "keras: loss, running mean over the epoch"
    assert live.figure.ax.get_xlabel() == "training steps (Keras batches)"
    assert live.figure.ax.get_ylabel() == "loss as Keras logs it"
    assert png_height(live.image.value) > 100


def test_keras_batch_logs_are_running_means_of_the_epoch():
    """What the docstring and legend claim, checked against the installed Keras.

    With a learning rate of 0 the weights never move, so the mean over the
    epoch so far is the loss of the first samples seen, weighted by sample
    (the last batch is smaller), and the same in both epochs.
    """
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 5)).astype("float32")
    y = rng.normal(size=(40, 1)).astype("float32")
    model = compiled_mlp(learning_rate=0.0)
    squared = ((model.predict(x, verbose=0) - y) ** 2)[:, 0]
    live = gaviz.LivePlot(min_interval=0)
    model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[live])
    seen = [min(BATCH * (b.batch + 1), len(x)) for b in live.keras_log.batches]
    assert seen == [16, 32, 40] * 2
    np.testing.assert_allclose([b.loss for b in live.keras_log.batches],
                               [squared[:n].mean() for n in seen], rtol=1e-5)
    assert not np.isclose(live.keras_log.batches[-1].loss, squared[32:].mean(), rtol=1e-3)


def test_redraws_are_throttled_and_the_last_comes_at_train_end(regression_data):
    x, y = regression_data
    live = gaviz.LivePlot(min_interval=1e9)
    drawn = []
    png = live.figure.png
    live.figure.png = lambda: drawn.append(len(live.keras_log)) or png()
    compiled_mlp().fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[live])
    assert drawn == [1, 14]  # the first batch, then on_train_end only
    ys = live.figure.lines["run (Keras running mean)"].get_ydata()
    assert without_gaps(ys) == [b.loss for b in live.keras_log.batches]


@pytest.mark.parametrize("min_interval", [0, 1e9], ids=["every-point", "throttled"])
@pytest.mark.parametrize("keras_first", [True, False], ids=["keras-first", "update-first"])
def test_given_both_ways_each_update_is_drawn_once(regression_data, keras_first, min_interval):
    """As when the gaviz trainer drives Keras callbacks and ``on_update`` too."""
    x, y = regression_data
    live = gaviz.LivePlot(label="both", x_axis="updates", min_interval=min_interval)
    callbacks = keras.callbacks.CallbackList([live])
    batch_losses, lines_after_each_update, drawn = [], [], []
    png = live.figure.png
    live.figure.png = lambda: drawn.append(len(live.history)) or png()

    def keras_batch_end(update):  # Keras's logs: the running mean of the epoch
        batch_losses.append(update.loss)
        callbacks.on_train_batch_begin(update.update - 1)
        callbacks.on_train_batch_end(update.update - 1, {"loss": np.mean(batch_losses)})

    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2)
    callbacks.on_train_begin()
    callbacks.on_epoch_begin(0)
    history = trainer.fit(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(10),
        on_update=[*([keras_batch_end, live] if keras_first else [live, keras_batch_end]),
                   lambda _: lines_after_each_update.append(set(live.figure.lines))])
    callbacks.on_epoch_end(0, {"loss": np.mean(batch_losses)})
    callbacks.on_train_end()

    assert len(history) == 5
    assert len(live.keras_log) == 5  # recorded, not drawn
    # Even throttled, a Keras curve drawn before the first update is replaced at once.
    assert lines_after_each_update == [{"both"}] * 5
    np.testing.assert_array_equal(live.figure.lines["both"].get_ydata(), history.loss)
    np.testing.assert_array_equal(live.figure.lines["both"].get_xdata(), range(1, 6))
    assert live.figure.ax.get_ylabel() == "effective-batch loss"
    assert [t.get_text() for t in live.figure.ax.get_legend().get_texts()] == ["both"]
    assert png_height(live.image.value) > 100
    if min_interval == 0:  # one drawing per update, none for Keras's logs of it
        before_first_update = [0] if keras_first else []
        assert drawn == before_first_update + [1, 2, 3, 4, 5] + [5]  # + on_train_end


def test_on_update_alone_draws_as_before(regression_data):
    x, y = regression_data
    live = gaviz.LivePlot(label="mine", min_interval=0)
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2)
    history = trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), on_update=live)
    assert set(live.figure.lines) == {"mine"} and len(live.keras_log) == 0
    np.testing.assert_array_equal(live.figure.lines["mine"].get_xdata(), history.samples_seen)
    np.testing.assert_array_equal(live.figure.lines["mine"].get_ydata(), history.loss)
    assert live.figure.ax.get_xlabel() == "samples seen"


def test_steps_count_over_epochs_fits_and_steps_per_execution():
    """By hand, as Keras calls it with ``steps_per_execution=2`` (batch jumps
    by two), then a second ``fit`` whose epochs start again at 0."""
    log = KerasLog()
    for fit_batches in ([1, 3, 4], [1, 3, 4]):
        log.begin_epoch(0)
        for batch in fit_batches:
            log.end_batch(batch, {"loss": 1.0 + batch}, seconds=float(batch))
        log.end_epoch(0, {"loss": 9.0}, seconds=5.0)
    assert [b.step for b in log.batches] == [2, 4, 5, 7, 9, 10]
    xs, ys = running_mean_curve(log, "updates")
    assert without_gaps(xs) == [2, 4, 5, 7, 9, 10] and math.isnan(xs[3])
    assert without_gaps(ys) == [2.0, 4.0, 5.0] * 2
    assert epoch_points(log, "samples") == ([5, 10], [9.0, 9.0])
    assert epoch_points(log, "samples", "val_loss") == ([], [])  # no validation: no markers
    assert running_mean_curve(log, "seconds")[0][:3] == [1.0, 3.0, 4.0]
