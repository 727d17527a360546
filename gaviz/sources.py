"""Where a window's micro-batches come from, inside the graph.

Two sources, one interface: ``source.next()`` returns an object with
``has_value()`` and ``get_value()`` (a ``(x, y)`` or ``(x, y, sample_weight)``
micro-batch), as ``tf.data``'s ``Optional`` does.

- :class:`IteratorSource`: a ``tf.data`` iterator (or a distributed one).
- :class:`ArraySource`: arrays already in memory, cut into micro-batches in
  the graph by one ``gather`` per micro-batch, in an order fixed per epoch.
  No ``tf.data`` pipeline runs at all, which on a small model is most of
  what an epoch costs (benchmarks/bench_dispatch.py).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


class IteratorSource:
    """Micro-batches pulled from a ``tf.data`` iterator."""

    def __init__(self, iterator):
        self.iterator = iterator

    def next(self):
        return self.iterator.get_next_as_optional()


class ArraySource:
    """Micro-batches cut from in-memory tensors, ``batch_size`` rows at a time.

    Args:
        arrays: the tensors ``(x, y)`` or ``(x, y, sample_weight)`` (``x``
            and ``y`` may be nests), all with the same number of rows.
        order: the epoch's row order (int64 indices).
        cursor: an int64 variable: the next row of ``order`` to read.
        batch_size: rows per micro-batch (the last one may be shorter).
    """

    def __init__(self, arrays, order, cursor, batch_size):
        self.arrays, self.order, self.cursor = arrays, order, cursor
        self.batch_size = tf.cast(batch_size, tf.int64)

    def next(self):
        return _Slice(self)


class _Slice:
    """The next micro-batch of an :class:`ArraySource`, read when asked for."""

    def __init__(self, source):
        self.source = source
        self.start = source.cursor.read_value()
        self.rows = tf.shape(source.order, out_type=tf.int64)[0]

    def has_value(self):
        return self.start < self.rows

    def get_value(self):
        source = self.source
        end = tf.minimum(self.start + source.batch_size, self.rows)
        indices = source.order[self.start:end]
        source.cursor.assign(end)
        return tf.nest.map_structure(lambda a: tf.gather(a, indices), source.arrays)


def as_arrays(x, y, sample_weight):
    """``(x, y)`` or ``(x, y, sample_weight)`` as tensors; checks their row counts.

    Raises:
        ValueError: ``y`` is missing, or the arguments' first dimensions differ.
    """
    if y is None:
        raise ValueError(
            "`y` must be given when `x` is an array (or a dict of arrays): the targets, "
            "one row per row of `x`. Received: y=None. (A tf.data.Dataset of "
            "(x, y) micro-batches needs no `y`.)"
        )
    parts = (x, y) if sample_weight is None else (x, y, sample_weight)
    tensors = tf.nest.map_structure(_tensor, parts)
    counts = {
        name: {int(t.shape[0]) for t in tf.nest.flatten(part)}
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
    tensor = tf.convert_to_tensor(value)
    if tensor.shape.rank == 0:
        raise ValueError(
            "`x`, `y` and `sample_weight` must be arrays with one row per sample. "
            f"Received a scalar: {value!r}"
        )
    return tensor
