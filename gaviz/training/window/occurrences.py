"""A sparse gradient in a window: its occurrences, kept as ``Model.fit`` hands them over.

An ``Embedding``'s gradient is a ``tf.IndexedSlices``: one row per lookup,
so a token that occurs 50 times in a batch has 50 rows. Keras's optimizers
transform each row before rows of the same index are summed: Adam's second
moment receives the sum of each occurrence's square, not the square of the
row's sum, Adagrad's accumulator likewise, Adamax the sum of their absolute
values. Summing a window's slices into one dense gradient would give every
such optimizer another update than ``Model.fit``'s on the big batch.

So the window keeps a sparse gradient as its occurrences: each micro-batch's
rows, their values as sums (``count * gradient``), in the order they came.
Finished, they are one ``tf.IndexedSlices`` of the window's rows, the
values divided by the window's count: the big batch's own gradient, which
the optimizer applies by its own rules. (A dense gradient and a sparse one
on the same variable, a table tied to an output layer, arrive summed: the
tape adds them into a dense tensor, in ``Model.fit`` as here.)

Inside the graph's loops the occurrences are two TensorLists (scalar
``variant`` tensors: a loop carries them without shape invariants, and a
micro-batch appends to them without copying the rows before it);
:meth:`Occurrences.gathered` concatenates them once, when the window ends.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


class Occurrences(NamedTuple):
    """One variable's sparse gradient in a window: its micro-batches' slices in order.

    Attributes:
        values: a TensorList of each micro-batch's rows, ``[rows, ...]``,
            as sums (float32; float64 for a float64 variable).
        indices: a TensorList of their rows' indices in the table, int64.
    """

    values: tf.Tensor
    indices: tf.Tensor

    @classmethod
    def empty(cls, variable) -> "Occurrences":
        """No occurrences yet, for ``variable``."""
        return cls(
            tf.raw_ops.EmptyTensorList(element_shape=_row_shape(variable), max_num_elements=-1,
                                       element_dtype=sum_dtype(variable)),
            tf.raw_ops.EmptyTensorList(element_shape=tf.constant([-1], tf.int32),
                                       max_num_elements=-1, element_dtype=tf.int64),
        )

    @classmethod
    def holding(cls, slices: tf.IndexedSlices, variable) -> "Occurrences":
        """The occurrences of ``slices`` (a window kept between calls), for ``variable``."""
        return cls.empty(variable).pushed(slices)

    def pushed(self, slices) -> "Occurrences":
        """These occurrences, then those of ``slices`` (a micro-batch's ``tf.IndexedSlices``)."""
        if not isinstance(slices, tf.IndexedSlices):
            raise TypeError(
                "A variable whose window holds a sparse gradient's occurrences was given a "
                f"dense gradient (shape {slices.shape}): its gradient must arrive as "
                "tf.IndexedSlices in every micro-batch, as it did in the first."
            )
        dtype = sum_dtype(slices.values)
        return Occurrences(
            tf.raw_ops.TensorListPushBack(input_handle=self.values,
                                          tensor=tf.cast(slices.values, dtype)),
            tf.raw_ops.TensorListPushBack(input_handle=self.indices,
                                          tensor=tf.cast(slices.indices, tf.int64)),
        )

    def gathered(self, variable) -> tf.IndexedSlices:
        """All the occurrences, in order, as one ``tf.IndexedSlices`` of ``variable``'s shape."""
        values, _ = tf.raw_ops.TensorListConcatV2(
            input_handle=self.values, element_dtype=sum_dtype(variable),
            element_shape=_row_shape(variable), leading_dims=tf.constant([], tf.int64))
        indices, _ = tf.raw_ops.TensorListConcatV2(
            input_handle=self.indices, element_dtype=tf.int64,
            element_shape=tf.constant([-1], tf.int32), leading_dims=tf.constant([], tf.int64))
        return tf.IndexedSlices(values, indices, dense_shape=_dense_shape(variable))


def concatenated(first: tf.IndexedSlices, then: tf.IndexedSlices) -> tf.IndexedSlices:
    """The occurrences of ``first``, then those of ``then`` (in ``first``'s dtypes)."""
    return tf.IndexedSlices(
        tf.concat([first.values, tf.cast(then.values, first.values.dtype)], axis=0),
        tf.concat([tf.cast(first.indices, tf.int64), tf.cast(then.indices, tf.int64)], axis=0),
        first.dense_shape)


def scaled(gradient, factor):
    """``gradient * factor``, a dense tensor or a ``tf.IndexedSlices`` (its values scaled)."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype),
                                gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


def divided(gradient, divisor, no_nan: bool = False):
    """``gradient / divisor``, a dense tensor or a ``tf.IndexedSlices`` (its values
    divided); ``no_nan``: 0 where the divisor is 0."""
    divide = tf.math.divide_no_nan if no_nan else tf.math.truediv
    if isinstance(gradient, tf.IndexedSlices):
        values = gradient.values
        return tf.IndexedSlices(divide(values, tf.cast(divisor, values.dtype)), gradient.indices,
                                gradient.dense_shape)
    return divide(gradient, tf.cast(divisor, gradient.dtype))


def entries(gradient):
    """The tensor holding ``gradient``'s numbers (a ``tf.IndexedSlices``'s values)."""
    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def sum_dtype(variable):
    """float32 for every variable but float64 ones.

    Half-precision variables still accumulate in float32: summing many small
    float16 gradients loses them.
    """
    dtype = tf.as_dtype(variable.dtype)
    return tf.float64 if dtype == tf.float64 else tf.float32


def _row_shape(variable):
    """A TensorList's element shape for rows of ``variable``: ``[-1, *row]``."""
    return tf.constant([-1, *variable.shape[1:]], tf.int32)


def _dense_shape(variable):
    return tf.constant(list(variable.shape), tf.int64)
