"""fit's epoch loop (gaviz.training.fit.fitting) over scripted graph calls: what it records,
which callbacks it calls, when it raises. No window is really run here: a
stand-in window loop hands back packed WindowResults as the graph would, for a
stand-in feed's passes."""

import keras
import pytest
import tensorflow as tf
from helpers import make_mlp

from gaviz.training.data import feeds
from gaviz.training.fit import fitting
from gaviz.training.fit.call_size import CallSize
from gaviz.training.fit.history import NonFiniteUpdate
from gaviz.training.window import verdicts
from gaviz.training.window.arithmetic import WindowResult
from gaviz.training.window.tail import Tail


def result(applied=True, due=True, finite=True, exhausted=False, loss=0.5, rows=8.0, k=2,
           micro_steps=2):
    verdict = (verdicts.NOT_DUE if not due else
               verdicts.ACCEPTED if finite else verdicts.NOT_FINITE)
    return WindowResult(applied, verdict, exhausted, loss, rows, micro_steps, micro_steps, k,
                        rows).pack()


class ScriptedFeed(feeds.Feed):
    """An epoch (a pass) is a list of calls, each a list of packed results."""

    def __init__(self, epochs):
        super().__init__(feeds.FitData(None))
        self.epochs, self.calls = list(epochs), []

    def micro_batches(self):
        return 4

    def endless(self):
        return False

    def end_epoch(self):
        self.ended = getattr(self, "ended", 0) + 1

    def epoch(self):
        return (self, self.epochs.pop(0))


class ScriptedLoop:
    """A window loop whose calls over a pass hand back the pass's scripted results."""

    def start(self, epoch):
        feed, calls = epoch
        calls = iter(calls)

        def call(max_windows, k):
            feed.calls.append((int(max_windows), int(k)))
            rows = next(calls)
            return tf.stack(rows), tf.constant(len(rows))

        return call


def stand_in(tail="flush"):
    """What fit is given: a model, its optimizer, a (scripted) window loop and the rest."""
    model = make_mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.build((None, 5))
    model.optimizer.build(model.trainable_variables)
    return fitting.Training(model, model.optimizer, ScriptedLoop(), CallSize(1), lambda epoch: 2,
                            Tail(tail), tf.Variable(0, dtype=tf.int64))


class Events(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_begin(self, epoch, logs=None):
        self.seen.append(("epoch", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(("batch", batch))

    def on_train_end(self, logs=None):
        self.seen.append(("end",))


def fit(trainer, feed, epochs=2, callbacks=(), updates=()):
    return fitting.fit(trainer, feed, range(1, epochs + 1), list(updates), list(callbacks), 0, None)


def test_applied_windows_become_updates_and_batch_events():
    trainer, events, seen = stand_in(), Events(), []
    epoch = [[result()], [result(), result(exhausted=True, rows=4.0, micro_steps=1)]]
    feed = ScriptedFeed([epoch, epoch])
    history = fit(trainer, feed, callbacks=[events], updates=[seen.append])
    assert [u.update for u in seen] == [1, 2, 3, 4, 5, 6]
    assert history.update_epochs == [1, 1, 1, 2, 2, 2]
    assert history.epoch == [0, 1]  # Keras's: the epochs run, from 0
    assert history.samples[:3] == [8, 8, 4]
    assert history.samples_seen[-1] == 40
    assert history.loss == [0.5] * 6
    # One batch event per call, numbered by the updates applied so far.
    assert events.seen == [("epoch", 0), ("batch", 0), ("batch", 2),
                           ("epoch", 1), ("batch", 0), ("batch", 2), ("end",)]
    assert feed.calls == [(1, 2)] * 4
    assert feed.ended == 2  # each epoch's end is told to the feed (a PyDataset's on_epoch_end)


def test_a_window_not_applied_is_not_recorded():
    trainer = stand_in(tail="drop")
    feed = ScriptedFeed([[[result(), result(applied=False, due=False, exhausted=True)]]])
    assert len(fit(trainer, feed, epochs=1)) == 1


def test_a_non_finite_window_raises_after_calling_on_train_end():
    trainer, events = stand_in(), Events()
    feed = ScriptedFeed([[[result(), result(applied=False, finite=False, loss=float("nan"))]]])
    with pytest.raises(NonFiniteUpdate) as caught:
        fit(trainer, feed, epochs=1, callbacks=[events])
    assert caught.value.update == 2 and caught.value.epoch == 1
    assert events.seen[-1] == ("end",)


def test_an_empty_epoch_is_an_error_naming_x():
    feed = ScriptedFeed([[[result(applied=False, due=False, exhausted=True, micro_steps=0)]]])
    feed.epochs[0][0] = [WindowResult(False, verdicts.NOT_DUE, True, 0.0, 0.0, 0, 0, 2, 0.0).pack()]
    with pytest.raises(ValueError, match="`x` is empty"):
        fit(stand_in(), feed, epochs=1)


def test_stop_training_ends_fit_after_the_call_that_set_it():
    trainer = stand_in()

    def stop(update):
        trainer.model.stop_training = True

    epoch = [[result()], [result(exhausted=True)]]
    history = fit(trainer, ScriptedFeed([epoch, epoch]), updates=[stop])
    assert len(history) == 1
