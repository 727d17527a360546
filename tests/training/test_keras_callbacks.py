"""Issue 12: Keras callbacks, History and the progress bar, driven once per update.

Each behaviour is compared with the same callback under ``Model.fit(batch_size=K * B,
shuffle=False)`` on an identical clone of the model.
"""

import re

import keras
import numpy as np
import pytest
from helpers import assert_same_history, assert_same_weights, clone, make_mlp, start_of, weight_gap

import gaviz

B, K = 8, 4  # Keras's batch: 32; 100 rows make 4 updates per epoch (32, 32, 32, 4)
ROWS, UPDATES_PER_EPOCH = 100, 4


def regression(rows, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(rows, 1))).astype("float32")


X, Y = regression(ROWS)
X_VAL, Y_VAL = regression(40, seed=1)


def compiled_pair(optimizer=lambda: keras.optimizers.SGD(0.1)):
    """A compiled model, its trainer, and an identical compiled clone for Model.fit."""
    model = make_mlp()
    reference = clone(model)
    model.compile(optimizer=optimizer(), loss="mse", metrics=["mae"])
    reference.compile(optimizer=optimizer(), loss="mse", metrics=["mae"])
    return model, gaviz.AccumulationTrainer(model, accumulation_steps=K), reference


def fit_both(trainer, reference, make_callbacks, epochs=3, validation=True, **kwargs):
    """The same fresh callbacks for the trainer and for Model.fit; returns both lists."""
    ours, theirs = make_callbacks(), make_callbacks()
    val = {"validation_data": (X_VAL, Y_VAL)} if validation else {}
    trainer.fit(X, Y, batch_size=B, epochs=epochs, shuffle=False, callbacks=ours, verbose=0,
                **val, **kwargs)
    reference.fit(X, Y, batch_size=K * B, epochs=epochs, shuffle=False, callbacks=theirs,
                  verbose=0, **val, **kwargs)
    return ours, theirs


class Recorder(keras.callbacks.Callback):
    """Records the training events and the epoch logs it sees."""

    def __init__(self):
        super().__init__()
        self.events, self.epoch_logs, self.end_logs = [], [], None

    def on_train_begin(self, logs=None):
        self.events.append(("train_begin",))

    def on_train_end(self, logs=None):
        self.events.append(("train_end",))
        self.end_logs = dict(logs or {})

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(("epoch_begin", epoch))

    def on_epoch_end(self, epoch, logs=None):
        self.events.append(("epoch_end", epoch))
        self.epoch_logs.append(dict(logs))

    def on_train_batch_begin(self, batch, logs=None):
        self.events.append(("batch_begin", batch))

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(("batch_end", batch))


def test_callback_sees_keras_events_once_per_update():
    """A Keras Callback sees train, epoch and batch events as under Model.fit: a batch per update."""
    model, trainer, reference = compiled_pair()
    (ours,), (theirs,) = fit_both(trainer, reference, lambda: [Recorder()])

    assert ours.model is model
    assert ours.events == theirs.events
    batch_ends = [e for e in ours.events if e[0] == "batch_end"]
    assert len(batch_ends) == 3 * UPDATES_PER_EPOCH == int(trainer.optimizer.iterations.numpy())
    assert len(ours.epoch_logs) == 3
    assert_same_history(
        {k: [logs[k] for logs in ours.epoch_logs] for k in ours.epoch_logs[0]},
        {k: [logs[k] for logs in theirs.epoch_logs] for k in theirs.epoch_logs[0]},
    )
    assert set(theirs.epoch_logs[0]) == {"loss", "mae", "val_loss", "val_mae"}
    assert_same_history({k: [v] for k, v in ours.end_logs.items()},
                        {k: [v] for k, v in theirs.end_logs.items()})


@pytest.mark.parametrize("monitor", ["loss", "val_loss"])
def test_early_stopping_stops_like_keras(monitor):
    """EarlyStopping sets model.stop_training; the trainer stops after the same epoch as Model.fit."""
    model, trainer, reference = compiled_pair()
    start = start_of(model)

    # A min_delta no epoch can beat: Keras stops after epoch 2 of 6.
    def callbacks():
        return [keras.callbacks.EarlyStopping(monitor=monitor, patience=1, min_delta=100.0)]

    ours, theirs = fit_both(trainer, reference, callbacks, epochs=6)
    assert theirs[0].stopped_epoch == 1 and len(reference.history.history["loss"]) == 2
    assert ours[0].stopped_epoch == theirs[0].stopped_epoch
    assert int(trainer.optimizer.iterations.numpy()) == 2 * UPDATES_PER_EPOCH
    assert_same_weights(model, reference, start, terms=K * B)


def test_stop_training_mid_epoch_stops_after_that_update():
    """model.stop_training set in on_train_batch_end ends fit after that update, as in Model.fit."""

    class StopAtSecondBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True

    model, trainer, reference = compiled_pair()
    start = start_of(model)
    fit_both(trainer, reference, lambda: [StopAtSecondBatch()], epochs=3, validation=False)
    assert int(reference.optimizer.iterations.numpy()) == 2
    assert int(trainer.optimizer.iterations.numpy()) == 2
    assert_same_weights(model, reference, start, terms=K * B)


@pytest.mark.parametrize("construction", ["compiled", "compiled-without-optimizer"])
def test_reduce_lr_on_plateau_changes_the_trainer_optimizer(construction):
    """ReduceLROnPlateau lowers the trainer's own learning rate, which the next updates use."""
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    if construction == "compiled":
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
        trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    else:
        # compile without an optimizer attaches RMSprop: the trainer's SGD must replace it.
        model.compile(loss="mse", metrics=["mae"])
        trainer = gaviz.AccumulationTrainer(
            model, keras.optimizers.SGD(0.1), "mse", accumulation_steps=K, metrics=["mae"]
        )
    assert model.optimizer is trainer.optimizer

    def callbacks():  # no epoch improves by 100: the rate halves after epochs 2 and 3
        return [keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0,
                                                  min_delta=100.0)]

    fit_both(trainer, reference, callbacks, epochs=3, validation=False)
    expected_rate = float(np.asarray(reference.optimizer.learning_rate))
    assert expected_rate < 0.1 / 2 + 1e-9
    np.testing.assert_allclose(float(np.asarray(trainer.optimizer.learning_rate)), expected_rate)
    assert_same_weights(model, reference, start, terms=K * B)


def test_model_checkpoint_saves_weights_and_optimizer_state(tmp_path):
    """ModelCheckpoint writes a .keras file holding the weights and the optimizer (iterations = updates)."""
    model, trainer, _ = compiled_pair(lambda: keras.optimizers.Adam(0.01))
    path = tmp_path / "model.keras"
    trainer.fit(X, Y, batch_size=B, epochs=2, shuffle=False, verbose=0,
                callbacks=[keras.callbacks.ModelCheckpoint(str(path))])
    loaded = keras.models.load_model(path)

    assert int(loaded.optimizer.iterations.numpy()) == 2 * UPDATES_PER_EPOCH
    assert weight_gap(loaded, model) == 0.0
    # Adam's moments too (variable names differ between the two models: compare in order).
    ours, saved = trainer.optimizer.variables, loaded.optimizer.variables
    assert len(saved) == len(ours) > 1
    for mine, theirs in zip(ours, saved):
        np.testing.assert_array_equal(np.asarray(theirs), np.asarray(mine), err_msg=mine.path)


def test_history_callback_matches_keras():
    """A keras.callbacks.History passed in gets Model.fit's history dict and epoch list."""
    model, trainer, reference = compiled_pair()
    (ours,), (theirs,) = fit_both(trainer, reference, lambda: [keras.callbacks.History()])
    assert ours.epoch == theirs.epoch == [0, 1, 2]
    assert_same_history(ours.history, theirs.history)


def _steps(text):
    """The "done/total" step counters a progress bar printed (epoch headers left out)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the bar's colours
    text = re.sub(r"Epoch \d+/\d+", "", text)
    return re.findall(r"\b(\d+)/(\d+)\b", text)


def test_verbose_1_prints_keras_progress_bar(capsys):
    """verbose=1 prints Keras's progress bar: "Epoch i/n", one step per update."""
    _, trainer, reference = compiled_pair()
    capsys.readouterr()
    trainer.fit(X, Y, batch_size=B, epochs=3, shuffle=False, verbose=1)
    ours = capsys.readouterr().out
    reference.fit(X, Y, batch_size=K * B, epochs=3, shuffle=False, verbose=1)
    theirs = capsys.readouterr().out

    for epoch in (1, 2, 3):
        assert f"Epoch {epoch}/3" in ours
    total = str(UPDATES_PER_EPOCH)
    # How many steps are drawn (4/4 included) depends on timing; every counter
    # is out of the updates per epoch, and each epoch ends on "4/4".
    assert {t for _, t in _steps(theirs)} == {total} == {t for _, t in _steps(ours)}
    for output in (ours, theirs):
        epochs = output.split("Epoch ")[1:]
        assert len(epochs) == 3
        assert all(_steps(text)[-1] == (total, total) for text in epochs)
    assert "loss:" in ours and "mae:" in ours


def test_verbose_0_prints_nothing(capsys):
    """verbose=0 prints nothing at all."""
    _, trainer, _ = compiled_pair()
    capsys.readouterr()
    trainer.fit(X, Y, batch_size=B, epochs=2, shuffle=False, verbose=0,
                validation_data=(X_VAL, Y_VAL))
    trainer.evaluate(X_VAL, Y_VAL, verbose=0)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Epoch" not in captured.err


def test_callback_error_leaves_trainer_consistent_and_ends_training():
    """A callback raising mid-fit: weights and optimizer.iterations of the last update,
    on_train_end still called."""

    class Explode(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                raise RuntimeError("boom from a callback")

    model, trainer, _ = compiled_pair(lambda: keras.optimizers.Adam(0.01))
    start = start_of(model)
    recorder = Recorder()
    with pytest.raises(RuntimeError, match="boom from a callback"):
        trainer.fit(X, Y, batch_size=B, epochs=2, shuffle=False, verbose=0,
                    callbacks=[recorder, Explode()])

    assert recorder.events[-1] == ("train_end",)
    assert int(trainer.optimizer.iterations.numpy()) == 3
    # Keras on the first three big batches: the weights after update 3.
    reference = clone(make_mlp())
    reference.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    reference.fit(X[: 3 * K * B], Y[: 3 * K * B], batch_size=K * B, epochs=1, shuffle=False,
                  verbose=0)
    assert_same_weights(model, reference, start, terms=K * B)
    assert weight_gap(model, make_mlp()) > 1e-3


def test_live_plot_is_a_keras_callback():
    """gaviz.LivePlot works as a Keras callback in Model.fit: one point per batch, a drawn curve."""
    plot = gaviz.LivePlot()
    assert isinstance(plot, keras.callbacks.Callback)
    _, _, reference = compiled_pair()
    reference.fit(X, Y, batch_size=K * B, epochs=2, shuffle=False, verbose=0, callbacks=[plot])
    plot.redraw()
    assert len(plot.keras_log) == 2 * UPDATES_PER_EPOCH  # one point per Keras batch
    assert len(plot.history) == 0  # no gaviz updates: nothing drawn twice
    assert plot.image.value  # a PNG


class _Interrupt(keras.callbacks.Callback):
    """Raises at the start of ``epoch`` (0-based), as a crash would."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise RuntimeError("interrupted")


def test_backup_and_restore_resumes_where_training_stopped(tmp_path):
    """BackupAndRestore: a run interrupted in epoch 3, resumed, ends where an uninterrupted run does."""
    _, trainer, reference = compiled_pair()
    start = start_of(reference)
    backup = str(tmp_path / "backup")
    with pytest.raises(RuntimeError, match="interrupted"):
        trainer.fit(X, Y, batch_size=B, epochs=4, shuffle=False, verbose=0,
                    callbacks=[keras.callbacks.BackupAndRestore(backup), _Interrupt(2)])
    assert int(trainer.optimizer.iterations.numpy()) == 2 * UPDATES_PER_EPOCH
    history = trainer.fit(X, Y, batch_size=B, epochs=4, shuffle=False, verbose=0,
                          callbacks=[keras.callbacks.BackupAndRestore(backup)])
    assert len(history.history["loss"]) == 2  # epochs 3 and 4 only
    reference.fit(X, Y, batch_size=K * B, epochs=4, shuffle=False, verbose=0)
    assert_same_weights(trainer.model, reference, start, terms=K * B)


def test_tensorboard_writes_the_epoch_logs(tmp_path):
    """TensorBoard: event files with the epoch's loss and metrics, for training and validation."""
    import tensorflow as tf

    _, trainer, _ = compiled_pair()
    log_dir = tmp_path / "logs"
    history = trainer.fit(X, Y, batch_size=B, epochs=2, shuffle=False, verbose=0,
                          validation_data=(X_VAL, Y_VAL),
                          callbacks=[keras.callbacks.TensorBoard(str(log_dir))])
    written = {}
    for run in ("train", "validation"):
        for path in (log_dir / run).glob("events.out.tfevents.*"):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                for value in event.summary.value:
                    if not value.tag.startswith("epoch_"):
                        continue  # the model's config, written once
                    number = (float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
                              else value.simple_value)
                    written.setdefault((run, value.tag), []).append(number)
    np.testing.assert_allclose(written[("train", "epoch_loss")], history.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(written[("train", "epoch_mae")], history.history["mae"], rtol=1e-6)
    np.testing.assert_allclose(written[("validation", "epoch_loss")], history.history["val_loss"],
                               rtol=1e-6)


def test_fit_returns_keras_history_of_the_same_run():
    """history, epoch, params and model as Model.fit's History; the updates under their own name."""
    model, trainer, reference = compiled_pair()
    ours = trainer.fit(X, Y, batch_size=B, epochs=3, shuffle=False, verbose=0,
                       validation_data=(X_VAL, Y_VAL))
    theirs = reference.fit(X, Y, batch_size=K * B, epochs=3, shuffle=False, verbose=0,
                           validation_data=(X_VAL, Y_VAL))
    assert isinstance(ours, keras.callbacks.History)
    assert ours.epoch == theirs.epoch == [0, 1, 2]
    assert_same_history(ours.history, theirs.history)
    assert ours.params == theirs.params
    assert ours.model is model and model.history is ours
    assert len(ours) == len(ours.updates) == 3 * 4  # 100 rows: 4 updates an epoch
    assert ours.update_epochs == sorted(ours.update_epochs) and ours.update_epochs[-1] == 3
    # Keras's resume idiom trains the epochs after the last one run.
    resumed = trainer.fit(X, Y, batch_size=B, epochs=5, initial_epoch=ours.epoch[-1] + 1,
                          shuffle=False, verbose=0)
    assert resumed.epoch == [3, 4]


def test_backup_and_restore_with_a_carried_window_is_refused(tmp_path):
    """The window carried across epochs is not in Keras's backup: refused by name, never
    resumed onto other weights than the uninterrupted run's."""
    model = make_mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K, tail="carry")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    with pytest.raises(ValueError, match="BackupAndRestore.*tail=\"carry\".*tail=\"flush\""):
        trainer.fit(X, Y, batch_size=B, epochs=2, verbose=0, callbacks=[backup])
    assert int(trainer.optimizer.iterations.numpy()) == 0  # refused before training
    trainer.fit(X, Y, batch_size=B, epochs=1, verbose=0, callbacks=[keras.callbacks.History()])


class _KillMidEpoch(keras.callbacks.Callback):
    """Raises at a batch of ``epoch`` (0-based), as a process killed mid-epoch would."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.epoch, self.batch, self.current = epoch, batch, None

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current == self.epoch and batch == self.batch:
            raise RuntimeError("killed")


def test_a_run_killed_mid_epoch_resumes_onto_the_uninterrupted_runs_weights(tmp_path):
    """Killed in the middle of epoch 3, restarted with the same BackupAndRestore: the
    resumed run replays epoch 3 from its backup and ends where an uninterrupted run does."""
    model, trainer, reference = compiled_pair(lambda: keras.optimizers.Adam(0.01))
    start = start_of(model)
    backup = str(tmp_path / "backup")
    with pytest.raises(RuntimeError, match="killed"):
        trainer.fit(X, Y, batch_size=B, epochs=4, shuffle=False, verbose=0,
                    callbacks=[keras.callbacks.BackupAndRestore(backup), _KillMidEpoch(2, 2)])
    assert int(trainer.optimizer.iterations.numpy()) == 2 * UPDATES_PER_EPOCH + 2
    # A new process: a fresh model, compiled and built, a fresh trainer, the same backup.
    restarted = make_mlp()
    restarted.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    again = gaviz.AccumulationTrainer(restarted, accumulation_steps=K)
    again.fit(X, Y, batch_size=B, epochs=4, shuffle=False, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(backup)])
    reference.fit(X, Y, batch_size=K * B, epochs=4, shuffle=False, verbose=0)
    assert_same_weights(restarted, reference, start, terms=K * B)
