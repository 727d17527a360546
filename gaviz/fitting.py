"""The Python side of ``fit``: epochs, graph calls, records and callbacks.

Each graph call runs one or more windows and returns one packed
:class:`~gaviz.window.WindowResult` per window; this loop turns them into
:class:`~gaviz.history.Update` records, calls the callbacks, raises on a
non-finite window, and decides how many windows the next call may run.
"""

from __future__ import annotations

import contextlib
import time

import keras
import tensorflow as tf

from gaviz import checks, sources
from gaviz.history import History, NonFiniteUpdate, Update
from gaviz.window import WindowResult

#: With ``windows_per_call="auto"`` and nobody listening, calls grow (doubling)
#: while they take less than this, so Python's share of an epoch shrinks while
#: ``stop_training`` still lands within a fraction of a second.
AUTO_CALL_SECONDS = 0.02
AUTO_MAX_WINDOWS = 256


def fit(trainer, feed, epochs, updates, callbacks, verbose, validation) -> History:
    """Trains ``trainer`` on ``feed`` for ``epochs`` (a range of epoch numbers
    counted from 1); see ``AccumulationTrainer.fit``.

    Keras's ``CallbackList`` drives ``callbacks`` (plus its History and,
    unless ``verbose`` is 0, its progress bar) as ``Model.fit`` does;
    ``updates`` are the ``on_update`` functions. Whatever is raised,
    ``on_train_end`` is called before it propagates.
    """
    verbose = checks.check_verbose(verbose)
    steps = feed.updates_per_epoch(trainer.accumulation_steps_for(1), trainer.tail)
    callback_list = keras.callbacks.CallbackList(
        callbacks, add_history=True, add_progbar=verbose != 0, model=trainer.model,
        verbose=verbose, epochs=epochs.stop - 1, steps=steps,
    )
    run = _Run(trainer, updates, callback_list, listening=bool(updates) or bool(callbacks))
    trainer.stop_training = False
    trainer.model._initial_epoch = None
    callback_list.on_train_begin()
    # BackupAndRestore, resuming, sets where to start (0-based, as Keras).
    resume_at = getattr(trainer.model, "_initial_epoch", None)
    if resume_at:
        epochs = range(max(resume_at + 1, epochs.start), epochs.stop)
    try:
        for epoch in epochs:
            run.epoch(feed, epoch, validation)
            if trainer.stop_training:
                break
        trainer.optimizer.finalize_variable_values(trainer.model.trainable_variables)
    except BaseException:
        # The model and optimizer hold the last applied update; callbacks
        # that clean up (close files, restore weights) still run.
        _end_after_error(callback_list, run.logs)
        raise
    callback_list.on_train_end(logs=run.logs)
    run.history.history = callback_list._history.history
    return run.history


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

    def __init__(self, trainer, updates, callback_list, listening):
        self.trainer = trainer
        self.updates = updates
        self.callbacks = callback_list
        self.history = History()
        self.logs = None
        self.samples_seen = 0
        self.start = time.perf_counter()
        # The trainer's, so what auto learned carries over to the next fit.
        self.windows = trainer.call_size
        self.windows.listening = listening

    def epoch(self, feed, epoch, validation) -> None:
        """One epoch: its windows, then its logs, validation and callbacks."""
        trainer, model = self.trainer, self.trainer.model
        k = trainer.accumulation_steps_for(epoch)
        steps = feed.updates_per_epoch(k, trainer.tail)
        if steps != self.callbacks.params.get("steps"):  # a schedule of k
            self.callbacks.set_params({**self.callbacks.params, "steps": steps})
        checks.check_epoch_length(feed.micro_batches(), k, trainer.tail)
        model.reset_metrics()
        self.callbacks.on_epoch_begin(epoch - 1)
        consumed = self._calls(feed.epoch(), epoch, k)
        if consumed == 0 and not trainer.stop_training:
            raise ValueError(_empty_epoch_message(epoch))
        checks.check_epoch_length(feed.micro_batches() or consumed, k, trainer.tail)
        logs = _logs(model)
        if validation is not None and validation.due(epoch):
            logs.update(validation.run(model, self.callbacks))
        self.callbacks.on_epoch_end(epoch - 1, logs)
        self.logs = logs

    def _calls(self, call, epoch, k) -> int:
        """Runs the windows of one epoch through ``call(max_windows, k)``;
        returns the micro-batches consumed."""
        k_tensor = tf.constant(k, tf.int64)
        consumed = step = 0
        while not self.trainer.stop_training:
            self.callbacks.on_train_batch_begin(step)
            started = time.perf_counter()
            rows, done = call(self.windows.next(), k_tensor)
            rows = rows.numpy()[: int(done)]
            self.windows.observe(time.perf_counter() - started, len(rows))
            results = [WindowResult.unpack(row) for row in rows]
            consumed += sum(r.consumed for r in results)
            applied = sum(self._record(result, epoch) for result in results)
            if applied:
                step += applied
                self.callbacks.on_train_batch_end(step - 1, _logs(self.trainer.model))
            if results[-1].exhausted:
                break
        return consumed

    def _record(self, result, epoch) -> bool:
        """Records an applied window as an Update (True), or raises on a non-finite one."""
        if result.due and not result.finite:
            raise NonFiniteUpdate(
                update=len(self.history) + 1,
                epoch=epoch,
                loss=result.loss,
                iterations=int(self.trainer.optimizer.iterations.numpy()),
            )
        if not result.applied:
            return False
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
        for callback in self.updates:
            callback(update)
        return True


def _logs(model) -> dict:
    """The model's metric results (loss first) as Python floats, as Keras logs them."""
    return {name: float(value) for name, value in model.get_metrics_result().items()}


class Validation:
    """``validation_data``, evaluated with ``model.evaluate`` every ``freq`` epochs."""

    def __init__(self, x, y, sample_weight, batch_size, freq):
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.batch_size, self.freq = batch_size, freq

    @classmethod
    def make(cls, data, batch_size, freq):
        """None without data; raises ValueError for data of the wrong form."""
        if data is None:
            return None
        if isinstance(data, tf.data.Dataset):
            return cls(data, None, None, None, freq)
        try:
            if not isinstance(data, (tuple, list)):
                raise TypeError(type(data).__name__)
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(tuple(data))
            if y is None:
                raise ValueError("no targets")
        except (TypeError, ValueError):
            raise ValueError(
                "`validation_data` must be (x_val, y_val), (x_val, y_val, sample_weight) "
                f"or a tf.data.Dataset. Received: {type(data).__name__}"
            ) from None
        return cls(x, y, sample_weight, batch_size, freq)

    def due(self, epoch) -> bool:
        return epoch % self.freq == 0

    def run(self, model, callbacks) -> dict:
        logs = model.evaluate(
            self.x, self.y, sample_weight=self.sample_weight, batch_size=self.batch_size,
            callbacks=callbacks, return_dict=True,
        )
        return {f"val_{name}": float(value) for name, value in logs.items()}


class CallSize:
    """How many windows the next graph call may run (``windows_per_call``).

    With several workers, ``"auto"`` never grows: each worker would time its
    own calls and pick its own sizes, and a worker reading the epoch's
    metrics (an all-reduce) while another still runs windows (all-reduces
    of gradients) deadlocks both, since collectives must be issued in the
    same order on every worker.
    """

    def __init__(self, windows_per_call, workers=1):
        self.auto = windows_per_call == "auto"
        self.size = 1 if self.auto else windows_per_call
        #: The most windows a call may ever run (the graph's result rows).
        self.capacity = AUTO_MAX_WINDOWS if self.auto else windows_per_call
        self.may_grow = self.auto and workers == 1
        self.listening = False
        self._tensors = {}

    def next(self) -> tf.Tensor:
        size = 1 if self.auto and self.listening else self.size
        if size not in self._tensors:
            self._tensors[size] = tf.constant(size, tf.int32)
        return self._tensors[size]

    def observe(self, seconds, windows) -> None:
        """Doubles a full call that was quick (auto, one worker, nobody listening)."""
        grow = self.may_grow and not self.listening and windows == self.size
        if grow and seconds < AUTO_CALL_SECONDS:
            self.size = min(2 * self.size, AUTO_MAX_WINDOWS)


def worker_count(strategy) -> int:
    """Processes taking part in ``strategy``'s collectives (1 without a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    tasks = resolver.cluster_spec().as_dict()
    return max(1, sum(len(tasks.get(job, ())) for job in ("chief", "worker")))


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
        checks.check_dataset(x, trainer.model)
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

    def micro_batches(self) -> int | None:
        """Micro-batches per epoch, when the dataset knows (None otherwise)."""
        cardinality = int(self.dataset.cardinality())
        return cardinality if cardinality >= 0 else None

    def updates_per_epoch(self, k, tail) -> int | None:
        return _updates_per_epoch(self.micro_batches(), k, tail)

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
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.element_spec = tf.nest.map_structure(
            lambda t: tf.TensorSpec((None, *t.shape[1:]), t.dtype), arrays
        )

    def micro_batches(self) -> int:
        return -(-self.rows // self.batch_size)

    def updates_per_epoch(self, k, tail) -> int | None:
        return _updates_per_epoch(self.micro_batches(), k, tail)

    def first(self):
        size = min(self.batch_size, self.rows)
        if size == 0:
            raise ValueError("`x` is empty: it has no rows.")
        return tf.nest.map_structure(lambda t: t[:size], self.arrays)

    def epoch(self):
        """``call(max_windows, k)`` running windows of this epoch's row order."""
        self.trainer.state.array_cursor.assign(0)
        order = sources.epoch_order(self.rows, self.shuffle)
        function = self.trainer.array_window_function
        return lambda max_windows, k: function(
            self.arrays, order, self.batch_size, self.rows, max_windows, k
        )


def _updates_per_epoch(micro_batches, k, tail):
    """Updates in an epoch of ``micro_batches`` (None when unknown or carried across)."""
    if micro_batches is None or tail == "carry":
        return None
    return -(-micro_batches // k) if tail == "flush" else micro_batches // k


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
