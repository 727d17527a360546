"""The Python side of ``fit``: epochs, graph calls, records and callbacks.

``fit`` is given what it trains (:class:`Training`: the model, its
optimizer, the window loop, the size of calls, k per epoch, the tail
policy) and the feed; it never reaches back into the trainer. Fit's data
runs one way: the feed describes each epoch as a pass, the window loop runs
it (its sources cut micro-batches, its micro-steps add them), and each
graph call returns one packed :class:`~gaviz.training.window.arithmetic.WindowResult`
per window; this loop turns them into :class:`~gaviz.training.fit.history.Update`
records, calls the callbacks, raises on a non-finite window, and decides how
many windows the next call may run.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Callable, NamedTuple

import keras
import tensorflow as tf

from gaviz import _keras, _tensorflow
from gaviz.training.data import feeds
from gaviz.training.fit import checks
from gaviz.training.fit.history import History, Update
from gaviz.training.window import refusals
from gaviz.training.window.arithmetic import WindowResult
from gaviz.training.window.tail import Tail


class Training(NamedTuple):
    """What ``fit`` trains, and with what.

    Attributes:
        model: the Keras model (``stop_training``, metrics, callbacks' model).
        optimizer: the optimizer each update steps.
        window_loop: runs a feed's pass in graph calls
            (:class:`gaviz.training.loop.window_loop.WindowLoop`).
        call_size: how many windows the next call may run
            (:class:`gaviz.training.fit.call_size.CallSize`).
        schedule: k per epoch (:class:`gaviz.training.fit.checks.Schedule`).
        tail: what becomes of a partial window.
        carried_micro_steps: the variable counting the micro-batches of a
            window carried into the next call (``tail="carry"``).
    """

    model: Any
    optimizer: Any
    window_loop: Any
    call_size: Any
    schedule: Callable[[int], int]
    tail: Tail
    carried_micro_steps: Any


def fit(training: Training, feed, epochs, updates, callbacks, verbose, validation,
        state_watch=None) -> History:
    """Trains on ``feed`` for ``epochs`` (a range of epoch numbers counted from
    1); see ``AccumulationTrainer.fit``.

    With the feed's ``steps_per_epoch``, an epoch is that many updates, and a
    pass over the data goes on across epochs, as in Keras's ``EpochIterator``. A
    ``state_watch`` (:class:`gaviz.training.fit.batch_layers.StateWatch`) is checked after
    the first graph call.

    Keras's ``CallbackList`` drives ``callbacks`` (plus its History and,
    unless ``verbose`` is 0, its progress bar) as ``Model.fit`` does;
    ``updates`` are the ``on_update`` functions. Whatever is raised,
    ``on_train_end`` is called before it propagates.
    """
    verbose = checks.check_verbose(verbose)
    model = training.model
    steps_per_epoch = feed.steps_per_epoch
    steps = steps_per_epoch or _updates_per_epoch(training, feed, epochs.start)
    history = History()  # Keras's History, as Model.fit adds it, with the updates too
    callback_list = keras.callbacks.CallbackList(
        [*_as_list(callbacks), history], add_history=False, add_progbar=verbose != 0,
        model=model, verbose=verbose, epochs=epochs.stop - 1, steps=steps,
    )
    run = _Run(training, updates, callback_list, history,
               listening=bool(updates) or bool(callbacks), steps_per_epoch=steps_per_epoch,
               state_watch=state_watch)
    if feed.endless():  # no end of a pass to close a window at: watch for short ones
        run.micro_batch_rows = int(tf.nest.flatten(feed.first())[0].shape[0])
    model.stop_training = False
    _keras.set_initial_epoch(model, None)
    callback_list.on_train_begin()
    # BackupAndRestore, resuming, sets where to start (0-based, as Keras).
    resume_at = _keras.initial_epoch(model)
    if resume_at:
        epochs = range(max(resume_at + 1, epochs.start), epochs.stop)
    try:
        for epoch in epochs:
            run.epoch(feed, epoch, validation)
            if _stopped(model):
                break
        training.optimizer.finalize_variable_values(model.trainable_variables)
    except BaseException:
        # The model and optimizer hold the last applied update; callbacks
        # that clean up (close files, restore weights) still run.
        _end_after_error(callback_list, run.logs)
        raise
    callback_list.on_train_end(logs=run.logs)
    return history


def _stopped(model) -> bool:
    """``model.stop_training``: set by a callback, an ``on_update`` function or
    another thread to end ``fit`` after the current graph call."""
    return bool(getattr(model, "stop_training", False))


def _as_list(callbacks) -> list:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


def _end_after_error(callback_list, logs):
    """``on_train_end`` for every callback but BackupAndRestore.

    BackupAndRestore deletes its backup when training ends: after a crash,
    the backup is what the next ``fit`` resumes from (Keras's own ``fit``
    calls no ``on_train_end`` after an error at all).
    """
    for callback in callback_list.callbacks:
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            continue
        with contextlib.suppress(Exception):
            callback.on_train_end(logs=logs)


class _Run:
    """One ``fit`` call's records, callbacks, and the size of its graph calls."""

    def __init__(self, training: Training, updates, callback_list, history, listening,
                 steps_per_epoch=None, state_watch=None):
        self.training = training
        self.steps_per_epoch = steps_per_epoch
        # With steps_per_epoch: the pass over the data an epoch left unfinished.
        self.open_pass = None
        # Data that repeats forever: its first micro-batch's rows (None: not watched).
        self.micro_batch_rows = None
        self.state_watch = state_watch  # checked after the first graph call, then dropped
        self.first_call = True
        self.updates = updates
        self.callbacks = callback_list
        self.history = history
        self.logs = None
        self.samples_seen = 0
        self.start = time.perf_counter()
        # The trainer's, so what auto learned carries over to the next fit.
        self.call_size = training.call_size
        self.call_size.listening = listening

    def epoch(self, feed, epoch, validation) -> None:
        """One epoch: its windows, then its logs, validation and callbacks."""
        training, model = self.training, self.training.model
        k = training.schedule(epoch)
        steps = self.steps_per_epoch or _updates_per_epoch(training, feed, epoch)
        if steps != self.callbacks.params.get("steps"):  # a schedule of k
            self.callbacks.set_params({**self.callbacks.params, "steps": steps})
        if feed.micro_batches() is not None:  # known before the epoch: checked now
            training.tail.check_epoch_length(feed.micro_batches(), k, stacklevel=4)
        model.reset_metrics()
        self.callbacks.on_epoch_begin(epoch - 1)
        consumed = self._windows_of_epoch(feed, epoch, k)
        feed.end_epoch()
        if consumed == 0 and not _stopped(model):
            raise ValueError(feeds.empty_message(epoch))
        if feed.micro_batches() is None and self.steps_per_epoch is None:
            # Known only now, from the pass (an epoch of steps_per_epoch
            # windows is not a pass: its length says nothing).
            training.tail.check_epoch_length(consumed, k, stacklevel=4)
        logs = _logs(model)
        if validation is not None and validation.due(epoch):
            logs.update(validation.run(model, self.callbacks))
        self.callbacks.on_epoch_end(epoch - 1, logs)
        self.logs = logs

    def _windows_of_epoch(self, feed, epoch, k) -> int:
        """Runs one epoch's windows; returns the micro-batches consumed.

        Without ``steps_per_epoch`` an epoch is a pass over the data. With it,
        the epoch runs that many windows, going on with the pass the last
        epoch left open (a fresh one if that pass had just ended) and ending
        early where the pass ends, as Keras does.
        """
        limit = self.steps_per_epoch
        if limit is None:
            return self._calls(self._start(feed), epoch, k)[0]
        continued = self.open_pass is not None
        call = self.open_pass or self._start(feed)
        consumed, windows, ended = self._calls(call, epoch, k, limit)
        if continued and ended and consumed == 0:  # the open pass had no data left
            call = self._start(feed)
            consumed, windows, ended = self._calls(call, epoch, k, limit)
        self.open_pass = None if ended else call
        if ended and windows < limit and not _stopped(self.training.model):
            warnings.warn(
                f"`x` ran out of data after {windows} of steps_per_epoch={limit} updates "
                f"in epoch {epoch}, so the epoch ended there (as in Model.fit); the next "
                "epoch starts a new pass. Make a dataset that can give steps_per_epoch * "
                "epochs windows (e.g. with .repeat()).",
                UserWarning,
                stacklevel=4,
            )
        return consumed

    def _start(self, feed):
        """The window loop's calls over the feed's next pass."""
        return self.training.window_loop.start(feed.epoch())

    def _calls(self, call, epoch, k, limit=None) -> tuple[int, int, bool]:
        """Runs windows through ``call(max_windows, k)`` until the data ends, or
        ``limit`` windows (updates due) have run; returns the micro-batches
        consumed, the windows due, and whether the data ended."""
        k_tensor = tf.constant(k, tf.int64)
        consumed = step = windows = 0
        ended = False
        model = self.training.model
        while not _stopped(model) and (limit is None or windows < limit):
            self.callbacks.on_train_batch_begin(step)
            started = time.perf_counter()
            size = self.call_size.next()
            if limit is not None:
                size = tf.minimum(size, limit - windows)
            with self._first_call_filtered():
                reports, done = call(size, k_tensor)
            if self.state_watch is not None:
                self.state_watch.check(k, stacklevel=6)
                self.state_watch = None
            reports = reports.numpy()[: int(done)]
            self.call_size.observe(time.perf_counter() - started, len(reports))
            results = [WindowResult.read(report) for report in reports]
            consumed += sum(r.consumed for r in results)
            windows += sum(r.due for r in results)
            applied = sum(self._record(result, epoch) for result in results)
            if applied:
                step += applied
                self.callbacks.on_train_batch_end(step - 1, _logs(model))
            if results[-1].exhausted:
                ended = True
                break
        return consumed, windows, ended

    def _first_call_filtered(self):
        """The fit's first graph call, where XLA compiles and logs that it
        started, with the native log filtered as TensorFlow's start-up log is
        (only after ``import gaviz.quiet``); later calls as they are."""
        if not self.first_call:
            return contextlib.nullcontext()
        self.first_call = False
        return _tensorflow.native_log_filtered()

    def _record(self, result, epoch) -> bool:
        """Records an applied window as an Update (True), or raises on a refused one."""
        refused = refusals.refusal(result.verdict, refusals.Context(
            iterations=int(self.training.optimizer.iterations.numpy()),
            update=len(self.history) + 1, epoch=epoch, loss=result.loss))
        if refused is not None:
            raise refused
        if not result.applied:
            return False
        samples = int(round(result.sample_count))
        self.samples_seen += samples
        update = Update(
            update=len(self.history) + 1,
            epoch=epoch,
            loss=result.loss,
            samples=samples,
            micro_steps=result.micro_steps,
            samples_seen=self.samples_seen,
            seconds=time.perf_counter() - self.start,
            accumulation_steps=result.accumulation_steps,
        )
        self.history.append(update)
        for callback in self.updates:
            callback(update)
        self._watch_short(result)
        return True

    def _watch_short(self, result) -> None:
        """Warns once when a window of data that repeats forever holds a short
        micro-batch: a pass may have ended inside the window."""
        full = self.micro_batch_rows
        if full is None or not 0 < result.rows < result.micro_steps * full:
            return
        self.micro_batch_rows = None  # once
        warnings.warn(
            f"A window of {result.micro_steps} micro-batches held {int(result.rows)} rows, "
            f"fewer than {result.micro_steps} x {full}: `x` repeats forever, so if a pass "
            "over the data ended inside this window, the window holds rows of two passes, "
            "where Model.fit on .batch(k * b).repeat() would take a short batch. Repeat "
            "before batching (.repeat().batch(b)) or batch with drop_remainder=True to get "
            "Model.fit's batches.",
            UserWarning,
            stacklevel=5,
        )


def _updates_per_epoch(training: Training, feed, epoch) -> int | None:
    """Updates ``epoch`` will apply (None when the data does not say)."""
    carried = int(training.carried_micro_steps.numpy())
    k = training.schedule(epoch)
    return training.tail.updates_per_epoch(feed.micro_batches(), k, carried)


def _logs(model) -> dict:
    """The model's metric results (loss first) as Python floats, as Keras logs them."""
    return {name: float(value) for name, value in model.get_metrics_result().items()}
