"""The Python side of ``fit``: epochs, graph calls, records and callbacks.

Each graph call runs one or more windows and returns one packed
:class:`~gaviz.window.WindowResult` per window; this loop turns them into
:class:`~gaviz.history.Update` records, calls the callbacks, raises on a
non-finite window, and decides how many windows the next call may run.
"""

from __future__ import annotations

import time

import tensorflow as tf

from gaviz.history import History, NonFiniteUpdate, Update
from gaviz.window import WindowResult

#: With ``windows_per_call="auto"`` and nobody listening, calls grow (doubling)
#: while they take less than this, so Python's share of an epoch shrinks while
#: ``stop_training`` still lands within a fraction of a second.
AUTO_CALL_SECONDS = 0.02
AUTO_MAX_WINDOWS = 256


def fit(trainer, dataset, epochs, callbacks) -> History:
    """Trains ``trainer`` for ``epochs`` epochs over ``dataset``; see ``AccumulationTrainer.fit``."""
    run = _Run(trainer, callbacks)
    source = dataset
    if trainer.num_replicas > 1 or _is_multi_worker(trainer.strategy):
        source = trainer.strategy.experimental_distribute_dataset(dataset)
    trainer.stop_training = False
    for epoch in range(1, epochs + 1):
        consumed = run.epoch(iter(source), epoch)
        if consumed == 0 and not trainer.stop_training:
            raise ValueError(_empty_epoch_message(epoch))
        if trainer.stop_training:
            break
    return run.history


class _Run:
    """One ``fit`` call's records, and the size of its graph calls."""

    def __init__(self, trainer, callbacks):
        self.trainer = trainer
        self.callbacks = callbacks
        self.history = History()
        self.samples_seen = 0
        self.start = time.perf_counter()
        # The trainer's, so what auto learned carries over to the next fit.
        self.windows = trainer.call_size
        self.windows.listening = bool(callbacks)
        self._function = None

    def epoch(self, iterator, epoch) -> int:
        """Runs the windows of one epoch; returns the micro-batches consumed."""
        k = tf.constant(self.trainer.accumulation_steps_for(epoch), tf.int64)
        consumed = 0
        while not self.trainer.stop_training:
            started = time.perf_counter()
            rows = self._call(iterator, k).numpy()
            self.windows.observe(time.perf_counter() - started, len(rows))
            results = [WindowResult.unpack(row) for row in rows]
            consumed += sum(r.consumed for r in results)
            for result in results:
                self._record(result, epoch)
            if results[-1].exhausted:
                break
        return consumed

    def _call(self, iterator, k):
        if self._function is None:
            # The traced graph itself: calling it skips matching the iterator
            # against every trace on each call (its type is the same every epoch).
            self._function = self.trainer.window_function(iterator)
        return self._function(iterator, self.windows.next(), k)

    def _record(self, result, epoch):
        if result.due and not result.finite:
            raise NonFiniteUpdate(
                update=len(self.history) + 1,
                epoch=epoch,
                loss=result.loss,
                iterations=int(self.trainer.optimizer.iterations.numpy()),
            )
        if not result.applied:
            return
        samples = int(round(result.sample_count))
        self.samples_seen += samples
        update = Update(
            update=len(self.history) + 1,
            epoch=epoch,
            loss=result.loss,
            effective_batch_size=samples,
            micro_steps=result.micro_steps,
            samples_seen=self.samples_seen,
            seconds=time.perf_counter() - self.start,
            accumulation_steps=result.accumulation_steps,
        )
        self.history.append(update)
        for callback in self.callbacks:
            callback(update)


class CallSize:
    """How many windows the next graph call may run (``windows_per_call``)."""

    def __init__(self, windows_per_call):
        self.auto = windows_per_call == "auto"
        self.size = 1 if self.auto else windows_per_call
        self.listening = False
        self._tensors = {}

    def next(self) -> tf.Tensor:
        size = 1 if self.auto and self.listening else self.size
        if size not in self._tensors:
            self._tensors[size] = tf.constant(size, tf.int32)
        return self._tensors[size]

    def observe(self, seconds, windows) -> None:
        """Doubles a full call that was quick (auto, nobody listening)."""
        grow = self.auto and not self.listening and windows == self.size
        if grow and seconds < AUTO_CALL_SECONDS:
            self.size = min(2 * self.size, AUTO_MAX_WINDOWS)


def _is_multi_worker(strategy):
    return getattr(strategy.extended, "_num_workers", 1) > 1


def _empty_epoch_message(epoch):
    if epoch == 1:
        return "`dataset` is empty: it yielded no micro-batches."
    return (
        f"`dataset` yielded no micro-batches in epoch {epoch}. A dataset that can be "
        "iterated only once (from a generator, say) needs .cache() or a fresh dataset "
        "per epoch."
    )
