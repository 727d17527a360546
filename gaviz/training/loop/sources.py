"""Where a window's micro-batches come from, inside the graph.

A feed describes each epoch as a pass (:class:`IteratorPass`,
:class:`ArrayPass`); the window loop runs it through a source. Two sources,
one interface: ``source.accumulate(add_micro_batch, sums, in_window, k)``
runs ``sums = add_micro_batch(element, sums)`` for each micro-batch until the
window holds ``k`` of them or the data runs out (``in_window``: the
micro-batches it holds so far), and returns ``(sums, in_window, consumed,
exhausted)``.

- :class:`IteratorSource`: a ``tf.data`` iterator (or a distributed one).
- :class:`ArraySource`: arrays already in memory, cut into micro-batches in
  the graph by one ``gather`` per micro-batch, in an order fixed per epoch.
  No ``tf.data`` pipeline runs at all, which on a small model is most of
  what an epoch costs (benchmarks/bench_dispatch.py).

Both loops run ``in_flight`` micro-steps at a time (``parallel_iterations``):
one, unless :mod:`gaviz.training.loop.overlap` allows two. A ``tf.while_loop``
otherwise runs up to 10 iterations at once, and several micro-batches'
activations would be alive at the peak (the memory benchmark measured 57 MiB
against 31 MiB), which is what accumulation is for avoiding.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf


class IteratorPass(NamedTuple):
    """One pass over a dataset of micro-batches: a fresh iterator of it."""

    iterator: Any


class ArrayPass(NamedTuple):
    """One pass over in-memory arrays: the arrays, this pass's row order, the
    micro-batch size and the rows (cut into micro-batches by :class:`ArraySource`)."""

    arrays: Any
    order: tf.Tensor
    batch_size: int
    rows: int


class IteratorSource:
    """Micro-batches pulled from a ``tf.data`` iterator, one optional at a time.

    On a plain (not distributed) iterator, the next micro-batch of the
    window is asked for while this one's micro-step runs, as Keras's
    ``steps_per_execution`` loop does: the two are independent ops of one
    loop iteration, so TensorFlow overlaps them. Never past the window's
    last micro-batch: what a window does not use stays in the iterator.
    """

    def __init__(self, iterator, in_flight: int = 1):
        self.iterator, self.in_flight = iterator, in_flight

    def accumulate(self, add_micro_batch, sums, in_window, k):
        if isinstance(self.iterator, tf.data.Iterator):
            return self._accumulate_reading_ahead(add_micro_batch, sums, in_window, k)

        def more(sums, in_window, consumed, exhausted):
            return tf.logical_and(in_window < k, tf.logical_not(exhausted))

        def next_micro_batch(sums, in_window, consumed, exhausted):
            with tf.name_scope("get_next"):
                element = self.iterator.get_next_as_optional()
            return tf.cond(
                element.has_value(),
                lambda: (add_micro_batch(element.get_value(), sums), in_window + 1, consumed + 1,
                         tf.constant(False)),
                lambda: (sums, in_window, consumed, tf.constant(True)),
            )

        start = (sums, in_window, tf.constant(0, tf.int64), tf.constant(False))
        # One micro-step at a time (a distributed iterator's reads are not ordered otherwise).
        return tf.while_loop(more, next_micro_batch, start, parallel_iterations=1)

    def _accumulate_reading_ahead(self, add_micro_batch, sums, in_window, k):
        consumed = tf.constant(0, tf.int64)
        with tf.name_scope("get_next"):
            following = tf.cond(
                in_window < k, self.iterator.get_next_as_optional,
                lambda: tf.experimental.Optional.empty(self.iterator.element_spec),
            )

        def more(sums, in_window, consumed, following):
            return tf.logical_and(in_window < k, following.has_value())

        def next_micro_batch(sums, in_window, consumed, current):
            # Read while this micro-step runs, unless the window ends with it;
            # after the read that gave `current`, so that micro-steps in
            # flight together still read the data in its order.
            with tf.name_scope("get_next"), tf.control_dependencies([current.has_value()]):
                following = tf.cond(in_window + 1 < k, self.iterator.get_next_as_optional,
                                    lambda: current)
            return add_micro_batch(current.get_value(), sums), in_window + 1, consumed + 1, following

        sums, in_window, consumed, _ = tf.while_loop(
            more, next_micro_batch, (sums, in_window, consumed, following),
            parallel_iterations=self.in_flight,
        )
        # A window that ends short of k ended with the data.
        return sums, in_window, consumed, in_window < k


class ArraySource:
    """Micro-batches cut from in-memory tensors, ``batch_size`` rows at a time.

    Every micro-batch but the epoch's last has the static shape
    ``[batch_size, ...]``, which XLA needs to compile the whole window loop
    (``jit_compile``): the full ones run in a counted loop, the short last one
    (when ``rows`` is not a multiple of ``batch_size``) as a step of its own.

    Args:
        arrays: the tensors ``(x, y)`` or ``(x, y, sample_weight)`` (``x``
            and ``y`` may be nests), all with ``rows`` rows.
        order: the epoch's row order (int64 indices).
        cursor: an int64 variable: the next row of ``order`` to read.
        batch_size: rows per micro-batch (a Python int).
        rows: rows in the arrays (a Python int).
        in_flight: micro-steps run at once (see the module's docstring).
    """

    def __init__(self, arrays, order, cursor, batch_size: int, rows: int, in_flight: int = 1):
        self.arrays, self.order, self.cursor = arrays, order, cursor
        self.batch_size, self.rows, self.in_flight = batch_size, rows, in_flight

    def accumulate(self, add_micro_batch, sums, in_window, k):
        # How many micro-batches this window takes is known before it starts:
        # a counted loop, no end-of-data test per micro-step.
        size = self.batch_size
        start = self.cursor.read_value()
        left = (self.rows - start + size - 1) // size
        consumed = tf.minimum(k - in_window, left)
        full = tf.minimum(consumed, (self.rows - start) // size)
        # A counted while loop, not tf.range, which XLA cannot compile.
        _, sums = tf.while_loop(
            lambda i, sums: i < full,
            lambda i, sums: (i + 1, add_micro_batch(self._cut(start + i * size, size), sums)),
            (tf.constant(0, tf.int64), sums), parallel_iterations=self.in_flight,
        )
        short = self.rows % size
        if short:  # the epoch's last micro-batch is short: it runs when this window reaches it
            sums = tf.cond(full < consumed,
                           lambda: add_micro_batch(self._cut(self.rows - short, short), sums),
                           lambda: sums)
        self.cursor.assign(tf.minimum(start + consumed * size, self.rows))
        exhausted = consumed == left
        return sums, in_window + consumed, consumed, exhausted

    def _cut(self, begin, size: int):
        """Rows ``order[begin:begin + size]`` of every array (a static ``size``).

        The indices are gathered, not sliced: under XLA a ``tf.slice`` whose
        start comes from the cursor (a variable) is compiled again for each
        start value, one XLA compilation per graph call on the first epoch.
        """
        with tf.name_scope("gather"):
            indices = tf.gather(self.order, begin + tf.range(size, dtype=tf.int64))
            return tf.nest.map_structure(
                lambda a: None if a is None else tf.gather(a, indices), self.arrays
            )
