"""What ``fit`` trains on: its data as epochs of graph calls.

A feed is the one object that knows ``fit``'s data. :func:`make_feed` takes
the arguments that describe it (:class:`FitData`), checks them once, and
returns a feed that answers what the trainer and the epoch loop ask: the
micro-batch size and effective batch, how many micro-batches an epoch holds,
whether the data ends, the epoch's length in updates (``steps_per_epoch``)
and the validation data (``validation_split``'s rows, or
``validation_data``). Nothing else inspects ``x``.

Each epoch is a pass over the data, described, not run: an
:class:`~gaviz.training.loop.sources.IteratorPass` (a fresh iterator) or an
:class:`~gaviz.training.loop.sources.ArrayPass` (the arrays and this epoch's
row order). The window loop runs it
(:meth:`gaviz.training.loop.window_loop.WindowLoop.start`); a feed knows
nothing of the trainer or its graph.

- :class:`DatasetFeed`: a ``tf.data.Dataset`` of micro-batches (distributed
  when the strategy has several replicas or workers); a Keras ``PyDataset``
  or a Python generator of micro-batches becomes one through Keras's adapters.
- :class:`ArrayFeed`: in-memory arrays cut into micro-batches inside the graph.
"""

from __future__ import annotations

import types
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from gaviz import _keras, _tensorflow
from gaviz._arguments import check_positive_int
from gaviz.training.data import data_checks, preprocessing
from gaviz.training.loop.sources import ArrayPass, IteratorPass


class FitData(NamedTuple):
    """``fit``'s arguments that describe its data, as the user gave them."""

    x: Any
    y: Any = None
    batch_size: int | None = None
    shuffle: bool = True
    sample_weight: Any = None
    class_weight: Any = None
    validation_split: float = 0.0
    validation_data: Any = None
    steps_per_epoch: int | None = None


#: Data that comes in batches already (Keras's own kinds besides arrays):
#: ``fit`` takes no ``y``, ``batch_size`` or ``sample_weight`` with it.
BATCHED = (tf.data.Dataset, keras.utils.PyDataset, types.GeneratorType)


def make_feed(data: FitData, model, strategy, targets: bool = True):
    """A :class:`DatasetFeed` or an :class:`ArrayFeed` for ``fit``'s data,
    turned into micro-batches by Keras's own data adapters, as ``Model.fit``
    turns them into batches (``class_weight`` included), after
    ``validation_split`` has taken its rows.

    ``targets``: False for a model whose loss its layers add with
    ``add_loss``, which may be given inputs alone (``y=None``, or a dataset
    of ``x``): its micro-batches are then ``(x, None)``.

    Raises:
        TypeError, ValueError: the arguments do not describe micro-batches.
    """
    if data.steps_per_epoch is not None:
        data = data._replace(
            steps_per_epoch=check_positive_int("steps_per_epoch", data.steps_per_epoch))
    preprocess = preprocessing.preprocess_samples(model)
    if not isinstance(data.x, BATCHED) and preprocess is None:
        for name in ("x", "y", "sample_weight"):
            data_checks.check_array_dtypes(name, getattr(data, name))
    data = _split_validation(data, raw=preprocess is not None)
    if preprocess is not None:
        feed = _preprocessed(data, model, strategy, targets, preprocess)
    else:
        feed = _micro_batches(data, model, strategy, targets)
    data_checks.check_epoch_ends(feed.endless(), feed.steps_per_epoch)
    return feed


def _split_validation(data: FitData, raw: bool = False) -> FitData:
    """``data`` after ``validation_split``: the last fraction of the arrays
    becomes the validation data, taken before any shuffling (Keras's own
    split; for a KerasHub task's ``raw`` data, strings among them, the same
    rows, as the task's own fit takes them); ignored when ``validation_data``
    is given.

    Raises:
        ValueError: the fraction is not in [0, 1), or ``x`` is not arrays.
    """
    fraction = data.validation_split
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ValueError(
            "`validation_split` must be a fraction in [0, 1). "
            f"Received: validation_split={fraction!r}"
        )
    if not fraction or data.validation_data is not None:
        return data
    if isinstance(data.x, BATCHED):
        raise ValueError(
            "`validation_split` takes arrays apart, as in Model.fit; `x` is a "
            f"{type(data.x).__name__}: pass `validation_data` instead. "
            f"Received: validation_split={fraction}"
        )
    split = preprocessing.split_rows if raw else _keras.train_validation_split
    (x, y, sample_weight), validation_data = split(
        (data.x, data.y, data.sample_weight), validation_split=fraction
    )
    return data._replace(x=x, y=y, sample_weight=sample_weight, validation_data=validation_data)


def _micro_batches(data: FitData, model, strategy, targets):
    """The feed for ``data``'s kind: a dataset, a PyDataset or generator, or arrays."""
    x, class_weight = data.x, data.class_weight
    if isinstance(x, tf.data.Dataset):
        _check_batched_already(data, "a tf.data.Dataset")
        data_checks.check_dataset(x, model, name="x", targets=targets)
        in_memory = None if _distributed(strategy) else _sliced_micro_batches(x, class_weight)
        if in_memory is not None:
            return in_memory(data)
        if class_weight is not None:
            x = x.map(_keras.make_class_weight_map_fn(class_weight))
        return DatasetFeed(data, x if targets else _paired(x), strategy)
    if isinstance(x, (keras.utils.PyDataset, types.GeneratorType)):
        _check_batched_already(
            data, "a PyDataset" if isinstance(x, keras.utils.PyDataset) else "a generator"
        )
        adapter = _keras.get_data_adapter(x, class_weight=class_weight,
                                          shuffle=bool(data.shuffle))
        dataset = adapter.get_tf_dataset()
        return DatasetFeed(data, dataset if targets else _paired(dataset), strategy,
                           adapter.on_epoch_end)
    if isinstance(x, tuple):
        raise TypeError(
            "`x` must be a tf.data.Dataset of (x, y) micro-batches, or an array (or a "
            "dict or list of arrays) given with `y`. Received: a tuple; pass "
            "fit(x, y, batch_size=...) or a tf.data.Dataset."
        )
    batch_size = _micro_batch_size(data)
    sample_weight = data.sample_weight
    if class_weight is not None:
        sample_weight = _class_weights(data.y, sample_weight, class_weight)
    arrays, rows = as_arrays(x, data.y, sample_weight, targets)
    if _distributed(strategy):
        dataset = _array_dataset(arrays, rows, batch_size, data.shuffle)
        return DatasetFeed(data, dataset, strategy, micro_batch_size=batch_size)
    return ArrayFeed(data, arrays, rows, batch_size)


def _sliced_micro_batches(dataset, class_weight=None):
    """``feed(data)``, an :class:`ArrayFeed` of the same micro-batches, for a
    dataset of ``(x, y)`` or ``(x, y, sample_weight)`` slices of in-memory
    numeric arrays, batched (:func:`gaviz._tensorflow.sliced_arrays`); None
    for any other dataset.

    ``class_weight`` becomes the arrays' per-row weights by the function
    Model.fit maps onto a dataset's batches: it weighs each row alone, so
    given all the rows at once it gives the same weights and raises the same
    errors (sample weights given too, several outputs).

    Its every pass gives the same micro-batches in the same order, so it is
    cut from the arrays inside the graph, as arrays are, and no ``tf.data``
    pipeline runs (on a small model, most of what an epoch costs:
    benchmarks/bench_dispatch.py).
    """
    sliced = _tensorflow.sliced_arrays(dataset)
    if sliced is None or not isinstance(sliced.tensors, tuple) or len(sliced.tensors) not in (2, 3):
        return None
    tensors = tf.nest.flatten(sliced.tensors)
    if not all(t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool for t in tensors):
        return None
    arrays = sliced.tensors
    if class_weight is not None:
        arrays = _keras.make_class_weight_map_fn(class_weight)(*arrays)
    rows = int(tensors[0].shape[0])
    if sliced.drop_remainder:
        rows -= rows % sliced.batch_size
    if rows == 0:  # said as a dataset's emptiness, by the dataset's feed
        return None
    arrays = tf.nest.map_structure(lambda t: t[:rows], arrays)
    return lambda data: ArrayFeed(data._replace(shuffle=False), arrays, rows,
                                  sliced.batch_size, batched=True)


def _preprocessed(data: FitData, model, strategy, targets, preprocess):
    """The feed of a KerasHub task: its raw micro-batches (arrays cut into
    ``batch_size`` rows, a dataset's elements, a PyDataset's or generator's
    batches) through the task's ``preprocess_samples``, then ``class_weight``,
    as the task's own ``fit`` does (:mod:`gaviz.training.data.preprocessing`)."""
    x, batch_size, end_epoch = data.x, None, None
    if isinstance(x, tf.data.Dataset):
        _check_batched_already(data, "a tf.data.Dataset")
        raw = x
    elif isinstance(x, (keras.utils.PyDataset, types.GeneratorType)):
        _check_batched_already(
            data, "a PyDataset" if isinstance(x, keras.utils.PyDataset) else "a generator"
        )
        adapter = _keras.get_data_adapter(x, shuffle=bool(data.shuffle))
        raw, end_epoch = adapter.get_tf_dataset(), adapter.on_epoch_end
    else:
        batch_size = _micro_batch_size(data)
        raw = preprocessing.raw_micro_batches(x, data.y, data.sample_weight, batch_size,
                                              bool(data.shuffle))
    dataset = preprocessing.apply(raw, preprocess)
    data_checks.check_preprocessed(dataset, type(model).__name__, targets)
    if data.class_weight is not None:
        dataset = dataset.map(_keras.make_class_weight_map_fn(data.class_weight))
    return DatasetFeed(data, dataset if targets else _paired(dataset), strategy, end_epoch,
                       micro_batch_size=batch_size)


def _micro_batch_size(data: FitData) -> int:
    """The micro-batch size of arrays: ``batch_size``, 32 by default (as Keras's)."""
    return check_positive_int("batch_size", 32 if data.batch_size is None else data.batch_size)


def batch_size_of(x) -> int | None:
    """The micro-batch size of a ``tf.data.Dataset`` of micro-batches (its
    first element's rows where its spec does not say), None for anything else."""
    if not isinstance(x, tf.data.Dataset):
        return None
    size = tf.nest.flatten(x.element_spec)[0].shape[:1].num_elements()
    if size is None:
        first = next(iter(read_ahead(x).take(1)), None)
        size = None if first is None else int(tf.shape(tf.nest.flatten(first)[0])[0])
    return size


def read_ahead(dataset):
    """What to read ``dataset``'s first elements from before training: a copy
    whose shuffles draw their own seeds (``_tensorflow.unshared_copy``), so that
    epoch 1 reads the order Model.fit's epoch 1 reads (a ``shuffle(seed=...)``
    that reshuffles each iteration gives each iterator the next order); the
    dataset itself where TensorFlow cannot copy it."""
    return _tensorflow.unshared_copy(dataset) or dataset


def _paired(dataset):
    """``dataset`` with inputs alone (``x`` or ``(x,)``, as Keras unpacks them)
    as ``(x, None)`` micro-batches; ``(x, y)`` and ``(x, y, w)`` as they are."""
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) in (2, 3):
        return dataset
    return dataset.map(lambda x: (x, None))  # a 1-tuple's one element is x too


def _check_batched_already(data: FitData, kind) -> None:
    for name in ("y", "batch_size", "sample_weight"):
        value = getattr(data, name)
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


class Feed:
    """What every feed answers about ``fit``'s data, besides its epochs.

    Args:
        data: ``fit``'s data arguments (after ``validation_split``).
        micro_batch_size: rows per micro-batch of arrays; None for data that
            comes batched already.

    Attributes:
        micro_batch_size: as given.
        steps_per_epoch: updates per epoch, or None: an epoch is a pass.
        validation_data: ``validation_data``, or the rows ``validation_split``
            took from the arrays, or None.
    """

    #: Micro-batches a probe of a dataset reads at most.
    PROBE_MICRO_BATCHES = 8

    def __init__(self, data: FitData, micro_batch_size: int | None = None):
        self.micro_batch_size = micro_batch_size
        self.steps_per_epoch = data.steps_per_epoch
        self.validation_data = data.validation_data

    def probe(self, rows: int):
        """About ``rows`` rows drawn from across the data, as one micro-batch
        (``(x, y)`` or ``(x, y, sample_weight)``): what a loss is checked on
        before training (:mod:`gaviz.training.loss.row_means`), so that the check
        does not rest on what the first micro-batch happens to hold."""
        return _spread(self._probe_pool(), rows)

    def _probe_pool(self):
        return self.first()

    def big_batch_size(self, accumulation_steps: int) -> int | None:
        """``accumulation_steps * micro_batch_size``, what ``Model.fit`` calls
        ``batch_size`` (and validates in too); None for batched data, for
        which Model.fit has none."""
        if self.micro_batch_size is None:
            return None
        return accumulation_steps * self.micro_batch_size


class DatasetFeed(Feed):
    """Epochs of a ``tf.data.Dataset`` of micro-batches (distributed if the strategy is).

    ``end_epoch``: called after each epoch (a Keras PyDataset's ``on_epoch_end``).
    ``micro_batch_size``: given when the dataset was made from arrays.
    """

    def __init__(self, data: FitData, dataset, strategy, end_epoch=None,
                 micro_batch_size: int | None = None):
        super().__init__(data, micro_batch_size)
        self.dataset = dataset
        # A PyDataset's or a generator's batches (with an end_epoch) are read
        # once per epoch; a tf.data pipeline may be read again.
        self.rereadable = end_epoch is None
        self.end_epoch = end_epoch or (lambda: None)
        self.element_spec = dataset.element_spec
        self.source = without_autotuning(dataset)
        if _distributed(strategy):
            self.source = strategy.experimental_distribute_dataset(self.source)
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
            elements = iter(read_ahead(self.dataset))
            self._first = next(elements, None)
            if _tensorflow.dataset_caches(self.dataset) and not self.endless():
                for _ in elements:  # to the end, which completes the cache
                    pass
        if self._first is None:
            raise ValueError(empty_message())
        return self._first

    def _probe_pool(self):
        """The first micro-batches (a tf.data pipeline's first few, joined
        where their shapes allow; otherwise the first alone)."""
        first = self.first()
        if not self.rereadable or self.endless():
            return first
        batches = list(read_ahead(self.dataset).take(self.PROBE_MICRO_BATCHES))
        try:
            return tf.nest.map_structure(
                lambda *parts: None if parts[0] is None else tf.concat(parts, axis=0), *batches
            )
        except (ValueError, TypeError, tf.errors.InvalidArgumentError):
            return first

    def epoch(self) -> IteratorPass:
        """A fresh pass over the data."""
        return IteratorPass(iter(self.source))


def without_autotuning(dataset):
    """``dataset`` with tf.data's autotuner off, unless its options say whether
    to autotune (``options.autotune.enabled`` set either way is kept).

    The autotuner models a pipeline and tunes its parallel stages and buffers
    from each new iterator's start, on a thread of its own; gaviz makes an
    iterator per epoch, and where the pipeline's threads and the training
    share a few cores, the tuning competes with both (on 2 cores, epochs of
    the pipelines benchmark took 16-33% less without it:
    benchmarks/bench_pipelines.py). Without it, an ``AUTOTUNE`` stage runs
    on every core tf.data has (at most ``autotune.initial_parallelism``, 16).
    The elements and their order are the same: options change how fast a
    pipeline runs, not what it gives.
    """
    if dataset.options().autotune.enabled is not None:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


class ArrayFeed(Feed):
    """Epochs of in-memory arrays, cut into micro-batches inside the graph.

    ``batched``: the arrays came batched already (a dataset's slices): as
    for any dataset, there is no ``micro_batch_size`` to validate in.
    """

    def __init__(self, data: FitData, arrays, rows, batch_size, batched: bool = False):
        super().__init__(data, None if batched else batch_size)
        self.arrays, self.rows, self.shuffle = arrays, rows, bool(data.shuffle)
        self.batch_size = batch_size
        self.element_spec = tf.nest.map_structure(
            lambda t: None if t is None else tf.TensorSpec((None, *t.shape[1:]), t.dtype), arrays
        )

    def micro_batches(self) -> int:
        return -(-self.rows // self.batch_size)

    def endless(self) -> bool:
        return False

    def end_epoch(self) -> None:
        """Nothing to do: each pass draws its own row order."""

    def _probe_pool(self):
        self.first()  # refuses empty arrays
        return self.arrays

    def first(self):
        size = min(self.batch_size, self.rows)
        if size == 0:
            raise ValueError(empty_message(arrays=True))
        return tf.nest.map_structure(lambda t: None if t is None else t[:size], self.arrays)

    def epoch(self) -> ArrayPass:
        """This epoch's pass: the arrays in a row order of its own."""
        return ArrayPass(self.arrays, epoch_order(self.rows, self.shuffle),
                         self.batch_size, self.rows)


def empty_message(epoch: int = 1, arrays: bool = False) -> str:
    """What is said of data that gives no micro-batch in ``epoch`` (from 1)."""
    if arrays:
        return "`x` is empty: it has no rows."
    if epoch == 1:
        return "`x` is empty: the dataset yielded no micro-batches."
    return (
        f"`x` yielded no micro-batches in epoch {epoch}. A dataset that can be "
        "iterated only once (from a generator, say) needs .cache() or a fresh dataset "
        "per epoch."
    )


def as_arrays(x, y, sample_weight, targets: bool = True):
    """``(x, y)`` or ``(x, y, sample_weight)`` as tensors; checks their row counts.

    ``targets``: False for a model whose loss its layers add, for which ``y``
    may be None (kept as None: the micro-batches are ``(x, None)``).

    Raises:
        ValueError: ``y`` is missing, or the arguments' first dimensions differ.
    """
    if y is None and targets:
        raise ValueError(
            "`y` must be given when `x` is an array (or a dict of arrays): the targets, "
            "one row per row of `x`. Received: y=None. (A tf.data.Dataset of "
            "(x, y) micro-batches needs no `y`; nor does a model compiled without a loss "
            "whose layers add it with add_loss.)"
        )
    parts = (x, y) if sample_weight is None else (x, y, sample_weight)
    tensors = tf.nest.map_structure(_tensor, parts)
    counts = {
        name: {int(t.shape[0]) for t in tf.nest.flatten(part) if t is not None}
        for name, part in zip(("x", "y", "sample_weight"), tensors)
    }
    rows = set().union(*counts.values())
    if len(rows) != 1:
        raise ValueError(
            "`x`, `y` and `sample_weight` must have the same number of rows (samples). "
            f"Received: rows {counts}"
        )
    return tensors, rows.pop()


def epoch_order(rows: int, shuffle: bool) -> tf.Tensor:
    """The rows' order for one epoch: shuffled (numpy's generator, which
    ``keras.utils.set_random_seed`` seeds) or as given."""
    order = np.random.permutation(rows) if shuffle else np.arange(rows)
    return tf.constant(order, tf.int64)


def _tensor(value):
    if value is None:  # no targets
        return None
    tensor = tf.convert_to_tensor(value)
    if tensor.shape.rank == 0:
        raise ValueError(
            "`x`, `y` and `sample_weight` must be arrays with one row per sample. "
            f"Received a scalar: {value!r}"
        )
    return tensor


def _spread(pool, rows: int):
    """Up to ``rows`` rows of ``pool`` (a micro-batch structure), evenly spaced."""
    count = int(tf.shape(tf.nest.flatten(pool)[0])[0])
    picks = np.unique(np.linspace(0, count - 1, min(rows, count)).round().astype(np.int64))
    return tf.nest.map_structure(lambda t: None if t is None else tf.gather(t, picks), pool)


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
