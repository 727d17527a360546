"""The Python side of ``fit``: epochs, graph calls, records and callbacks.

Each graph call runs one or more windows and returns one packed
:class:`~gaviz.window.WindowResult` per window; this loop turns them into
:class:`~gaviz.history.Update` records, calls the callbacks, raises on a
non-finite window, and decides how many windows the next call may run.
"""

from __future__ import annotations

import time

import tensorflow as tf

from gaviz import checks, sources
from gaviz.history import History, NonFiniteUpdate, Update
from gaviz.window import WindowResult

#: With ``windows_per_call="auto"`` and nobody listening, calls grow (doubling)
#: while they take less than this, so Python's share of an epoch shrinks while
#: ``stop_training`` still lands within a fraction of a second.
AUTO_CALL_SECONDS = 0.02
AUTO_MAX_WINDOWS = 256


def fit(trainer, feed, epochs, callbacks) -> History:
    """Trains ``trainer`` for ``epochs`` epochs of ``feed``; see ``AccumulationTrainer.fit``."""
    run = _Run(trainer, callbacks)
    trainer.stop_training = False
    for epoch in range(1, epochs + 1):
        consumed = run.epoch(feed.epoch(), epoch)
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

    def epoch(self, call, epoch) -> int:
        """Runs the windows of one epoch through ``call(max_windows, k)``;
        returns the micro-batches consumed."""
        k = tf.constant(self.trainer.accumulation_steps_for(epoch), tf.int64)
        consumed = 0
        while not self.trainer.stop_training:
            started = time.perf_counter()
            rows = call(self.windows.next(), k).numpy()
            self.windows.observe(time.perf_counter() - started, len(rows))
            results = [WindowResult.unpack(row) for row in rows]
            consumed += sum(r.consumed for r in results)
            for result in results:
                self._record(result, epoch)
            if results[-1].exhausted:
                break
        return consumed

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


def make_feed(trainer, x, y, batch_size, shuffle, sample_weight):
    """A :class:`DatasetFeed` or an :class:`ArrayFeed` for ``fit``'s arguments."""
    if isinstance(x, tf.data.Dataset):
        for name, value in (("y", y), ("batch_size", batch_size), ("sample_weight", sample_weight)):
            if value is not None:
                raise ValueError(
                    f"`{name}` must be None when `x` is a tf.data.Dataset: its elements "
                    f"are already (x, y) or (x, y, sample_weight) micro-batches. Received: "
                    f"{name}={value!r}"
                )
        checks.check_dataset(x)
        return DatasetFeed(trainer, x)
    if isinstance(x, tuple):
        raise TypeError(
            "`dataset` must be a tf.data.Dataset of (x, y) micro-batches, or `x` an "
            "array (or a dict or list of arrays) with `y`. Received: a tuple; pass "
            "fit(x, y, batch_size=...) or a tf.data.Dataset."
        )
    batch_size = checks.check_positive_int("batch_size", 32 if batch_size is None else batch_size)
    arrays, rows = sources.as_arrays(x, y, sample_weight)
    if trainer.num_replicas > 1 or _is_multi_worker(trainer.strategy):
        return DatasetFeed(trainer, _array_dataset(arrays, rows, batch_size, shuffle))
    return ArrayFeed(trainer, arrays, rows, batch_size, bool(shuffle))


class DatasetFeed:
    """Epochs of a ``tf.data.Dataset`` of micro-batches (distributed if the strategy is)."""

    def __init__(self, trainer, dataset):
        self.trainer, self.dataset = trainer, dataset
        self.element_spec = dataset.element_spec
        self.source = dataset
        if trainer.num_replicas > 1 or _is_multi_worker(trainer.strategy):
            self.source = trainer.strategy.experimental_distribute_dataset(dataset)
        self._function = None

    def first(self):
        first = next(iter(self.dataset.take(1)), None)
        if first is None:
            raise ValueError("`dataset` is empty: it yielded no micro-batches.")
        return first

    def epoch(self):
        """``call(max_windows, k)`` running windows of a fresh pass over the data."""
        iterator = iter(self.source)
        if self._function is None:
            # The traced graph itself: calling it skips matching the iterator
            # against every trace on each call (its type is the same every epoch).
            self._function = self.trainer.window_function(iterator)
        return lambda max_windows, k: self._function(iterator, max_windows, k)


class ArrayFeed:
    """Epochs of in-memory arrays, cut into micro-batches inside the graph."""

    def __init__(self, trainer, arrays, rows, batch_size, shuffle):
        self.trainer, self.arrays, self.rows = trainer, arrays, rows
        self.batch_size = tf.constant(batch_size, tf.int64)
        self.shuffle = shuffle
        self.element_spec = tf.nest.map_structure(
            lambda t: tf.TensorSpec((None, *t.shape[1:]), t.dtype), arrays
        )

    def first(self):
        size = min(int(self.batch_size), self.rows)
        if size == 0:
            raise ValueError("`x` is empty: it has no rows.")
        return tf.nest.map_structure(lambda t: t[:size], self.arrays)

    def epoch(self):
        """``call(max_windows, k)`` running windows of this epoch's row order."""
        self.trainer.state.array_cursor.assign(0)
        order = sources.epoch_order(self.rows, self.shuffle)
        function = self.trainer._array_windows_fn
        return lambda max_windows, k: function(self.arrays, order, self.batch_size, max_windows, k)


def _array_dataset(arrays, rows, batch_size, shuffle):
    dataset = tf.data.Dataset.from_tensor_slices(arrays)
    if shuffle:
        dataset = dataset.shuffle(rows, reshuffle_each_iteration=True)
    return dataset.batch(batch_size)


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
