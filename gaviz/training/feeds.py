"""What ``fit`` trains on: its data as epochs of graph calls.

A feed turns ``fit``'s ``x``, ``y``, ``batch_size``, ``shuffle`` and
``sample_weight`` into epochs: each epoch is a function ``call(max_windows,
accumulation_steps) -> (rows, done)`` that runs windows of the data's next
micro-batches. A feed is given the window functions and the array cursor
(:class:`WindowFunctions`), not the trainer.

- :class:`DatasetFeed`: a ``tf.data.Dataset`` of micro-batches (distributed
  when the strategy has several replicas or workers); a Keras ``PyDataset``
  or a Python generator of micro-batches becomes one through Keras's adapters.
- :class:`ArrayFeed`: in-memory arrays cut into micro-batches inside the graph.
"""

from __future__ import annotations

import types
from typing import Callable, NamedTuple

import keras
import tensorflow as tf

from gaviz import _keras, _tensorflow
from gaviz.training import checks, sources


class WindowFunctions(NamedTuple):
    """What a feed calls to run windows.

    Attributes:
        for_iterator: ``iterator -> concrete function (iterator, max_windows,
            accumulation_steps) -> (rows, done)``.
        for_arrays: the ``tf.function`` ``(arrays, order, batch_size, rows,
            max_windows, accumulation_steps) -> (rows, done)``.
        array_cursor: the int64 variable holding the next row of an epoch's
            order (the array function reads and advances it).
    """

    for_iterator: Callable
    for_arrays: Callable
    array_cursor: tf.Variable


#: Data that comes in batches already (Keras's own kinds besides arrays):
#: ``fit`` takes no ``y``, ``batch_size`` or ``sample_weight`` with it.
BATCHED = (tf.data.Dataset, keras.utils.PyDataset, types.GeneratorType)


def updates_per_epoch(micro_batches: int | None, accumulation_steps: int, tail: str,
                      carried: int = 0) -> int | None:
    """Updates in an epoch of ``micro_batches`` (None when unknown).

    ``"flush"`` applies the partial window, ``"drop"`` discards it; with
    ``"carry"`` the epoch's windows continue the ``carried`` micro-batches of
    the window left open by the epoch before.
    """
    if micro_batches is None:
        return None
    if tail == "flush":
        return -(-micro_batches // accumulation_steps)
    if tail == "carry":
        return (carried + micro_batches) // accumulation_steps
    return micro_batches // accumulation_steps


def make_feed(x, y, batch_size, shuffle, sample_weight, model, strategy,
              windows: WindowFunctions, class_weight=None, targets: bool = True):
    """A :class:`DatasetFeed` or an :class:`ArrayFeed` for ``fit``'s arguments,
    turned into micro-batches by Keras's own data adapters, as ``Model.fit``
    turns them into batches (``class_weight`` included).

    ``targets``: False for a model whose loss its layers add with
    ``add_loss``, which may be given inputs alone (``y=None``, or a dataset
    of ``x``): its micro-batches are then ``(x, None)``.

    Raises:
        TypeError, ValueError: the arguments do not describe micro-batches.
    """
    if isinstance(x, tf.data.Dataset):
        _check_batched_already(x, "a tf.data.Dataset", y, batch_size, sample_weight)
        checks.check_dataset(x, model, name="x", targets=targets)
        if class_weight is not None:
            x = x.map(_keras.make_class_weight_map_fn(class_weight))
        return DatasetFeed(x if targets else _paired(x), strategy, windows)
    if isinstance(x, (keras.utils.PyDataset, types.GeneratorType)):
        kind = "a PyDataset" if isinstance(x, keras.utils.PyDataset) else "a generator"
        _check_batched_already(x, kind, y, batch_size, sample_weight)
        adapter = _keras.get_data_adapter(x, class_weight=class_weight, shuffle=bool(shuffle))
        dataset = adapter.get_tf_dataset()
        return DatasetFeed(dataset if targets else _paired(dataset), strategy, windows,
                           adapter.on_epoch_end)
    if isinstance(x, tuple):
        raise TypeError(
            "`x` must be a tf.data.Dataset of (x, y) micro-batches, or an array (or a "
            "dict or list of arrays) given with `y`. Received: a tuple; pass "
            "fit(x, y, batch_size=...) or a tf.data.Dataset."
        )
    batch_size = checks.check_positive_int("batch_size", 32 if batch_size is None else batch_size)
    if class_weight is not None:
        sample_weight = _class_weights(y, sample_weight, class_weight)
    arrays, rows = sources.as_arrays(x, y, sample_weight, targets)
    if _distributed(strategy):
        return DatasetFeed(_array_dataset(arrays, rows, batch_size, shuffle), strategy, windows)
    return ArrayFeed(arrays, rows, batch_size, bool(shuffle), windows)


def _paired(dataset):
    """``dataset`` with inputs alone (``x`` or ``(x,)``, as Keras unpacks them)
    as ``(x, None)`` micro-batches; ``(x, y)`` and ``(x, y, w)`` as they are."""
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) in (2, 3):
        return dataset
    return dataset.map(lambda x: (x, None))  # a 1-tuple's one element is x too


def _check_batched_already(x, kind, y, batch_size, sample_weight) -> None:
    for name, value in (("y", y), ("batch_size", batch_size), ("sample_weight", sample_weight)):
        if value is not None:
            raise ValueError(
                f"`{name}` must be None when `x` is {kind}: its elements are already "
                f"(x, y) or (x, y, sample_weight) micro-batches. Received: {name}={value!r}"
            )


def _class_weights(y, sample_weight, class_weight):
    """``class_weight`` as per-row weights of arrays ``y``, by Keras's rule."""
    if sample_weight is not None:
        raise ValueError(
            "`class_weight` and `sample_weight` cannot both be given (as in Model.fit): "
            "multiply the class weights into `sample_weight` yourself. Received both."
        )
    if tf.nest.is_nested(y):
        raise ValueError(
            "`class_weight` needs a single array `y` (as in Model.fit: one output). "
            f"Received: y with {len(tf.nest.flatten(y))} arrays."
        )
    return _keras.class_weight_to_sample_weights(y, class_weight)


class DatasetFeed:
    """Epochs of a ``tf.data.Dataset`` of micro-batches (distributed if the strategy is).

    ``end_epoch``: called after each epoch (a Keras PyDataset's ``on_epoch_end``).
    """

    def __init__(self, dataset, strategy, windows: WindowFunctions, end_epoch=None):
        self.dataset, self.windows = dataset, windows
        self.end_epoch = end_epoch or (lambda: None)
        self.element_spec = dataset.element_spec
        self.source = dataset
        if _distributed(strategy):
            self.source = strategy.experimental_distribute_dataset(dataset)
        self._function = None
        self._first = None

    def micro_batches(self) -> int | None:
        """Micro-batches per epoch, when the dataset knows (None otherwise)."""
        cardinality = int(self.dataset.cardinality())
        return cardinality if cardinality >= 0 else None

    def endless(self) -> bool:
        """Whether the dataset repeats forever (``dataset.repeat()``)."""
        return int(self.dataset.cardinality()) == int(tf.data.INFINITE_CARDINALITY)

    def first(self):
        """The first micro-batch (read once: later calls return it again).

        A pass that stops early over a dataset that caches (``.cache()``)
        discards what it cached, and TensorFlow logs that the calling
        iterator did not fully read the dataset being cached, which
        ``Model.fit`` never causes. So a finite dataset that caches is read
        to its end here: its cache is then complete, and the first epoch
        reads from it (what follows the cache in the pipeline runs once more).
        """
        if self._first is None:
            elements = iter(self.dataset)
            self._first = next(elements, None)
            if _tensorflow.dataset_caches(self.dataset) and not self.endless():
                for _ in elements:  # to the end, which completes the cache
                    pass
        if self._first is None:
            raise ValueError("`x` is empty: the dataset yielded no micro-batches.")
        return self._first

    def epoch(self):
        """``call(max_windows, k)`` running windows of a fresh pass over the data."""
        iterator = iter(self.source)
        if self._function is None:
            # The traced graph itself: calling it skips matching the iterator
            # against every trace on each call (its type is the same every epoch).
            self._function = self.windows.for_iterator(iterator)
        return lambda max_windows, k: self._function(iterator, max_windows, k)


class ArrayFeed:
    """Epochs of in-memory arrays, cut into micro-batches inside the graph."""

    def __init__(self, arrays, rows, batch_size, shuffle, windows: WindowFunctions):
        self.arrays, self.rows = arrays, rows
        self.batch_size, self.shuffle, self.windows = batch_size, shuffle, windows
        self.element_spec = tf.nest.map_structure(
            lambda t: None if t is None else tf.TensorSpec((None, *t.shape[1:]), t.dtype), arrays
        )

    def micro_batches(self) -> int:
        return -(-self.rows // self.batch_size)

    def endless(self) -> bool:
        return False

    def end_epoch(self) -> None:
        """Nothing to do: each pass draws its own row order."""

    def first(self):
        size = min(self.batch_size, self.rows)
        if size == 0:
            raise ValueError("`x` is empty: it has no rows.")
        return tf.nest.map_structure(lambda t: None if t is None else t[:size], self.arrays)

    def epoch(self):
        """``call(max_windows, k)`` running windows of this epoch's row order."""
        self.windows.array_cursor.assign(0)
        order = sources.epoch_order(self.rows, self.shuffle)
        function = self.windows.for_arrays
        return lambda max_windows, k: function(
            self.arrays, order, self.batch_size, self.rows, max_windows, k
        )


def _array_dataset(arrays, rows, batch_size, shuffle):
    dataset = tf.data.Dataset.from_tensor_slices(arrays)
    if shuffle:
        dataset = dataset.shuffle(rows, reshuffle_each_iteration=True)
    return dataset.batch(batch_size)



def _distributed(strategy) -> bool:
    """Whether micro-batches must be split across replicas or workers."""
    return strategy.num_replicas_in_sync > 1 or _workers(strategy) > 1


def _workers(strategy) -> int:
    """The machines of a multi-worker strategy's cluster (its public cluster_resolver;
    None on one machine), chief included."""
    resolver = strategy.cluster_resolver
    if resolver is None:
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return sum(len(jobs.get(job, ())) for job in ("chief", "worker")) or 1
