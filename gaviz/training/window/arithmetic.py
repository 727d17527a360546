"""The arithmetic of one accumulation window, as plain functions of tensors.

A window is the run of micro-batches that feeds one optimizer update. Its
gradient is the gradient of the loss of the effective batch::

    g = (sum over the window of sum_i w_i * l_i) / n  +  grad(weight regularization)

where ``l_i`` are per-sample losses, ``w_i`` their sample weights (1 when
absent) and ``n`` the window's number of samples (loss elements, as Keras's
``sum_over_batch_size`` counts them). Because the sums are taken before the
division, ragged micro-batches and a partial window at the end of an epoch
are normalized exactly; dividing each micro-batch by its own size and then
averaging (the "mean of means") is not.

Nothing here owns a variable or knows about datasets, replicas or Python
loops: :class:`WindowSums` travels through the trainer's graph as loop
values, and these functions add to it and finish it. Per variable, a window
holds a dense sum, or, for a gradient that arrives as ``tf.IndexedSlices``
(an ``Embedding``'s), its occurrences
(:class:`~gaviz.training.window.occurrences.Occurrences`), which the
optimizer is handed as ``Model.fit`` hands them.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from gaviz.training.window import verdicts
from gaviz.training.window.occurrences import (
    Occurrences,
    concatenated,
    divided,
    entries,
    sum_dtype,
)


class WindowSums(NamedTuple):
    """The running sums of a window, or what one micro-batch adds to them.

    Attributes:
        gradients: per trainable variable, the summed gradient of the summed
            loss (float32, float64 for float64 variables); for a variable whose
            gradient is sparse, its occurrences instead
            (:class:`~gaviz.training.window.occurrences.Occurrences` while the
            window fills, a ``tf.IndexedSlices`` once gathered).
        loss_sum: the summed weighted loss, a float32 scalar.
        sample_count: loss elements (samples, tokens, pixels), float32.
        normalizer: what the window will be divided by: ``sample_count``, or
            the total sample weight with ``normalize="weights"``.
        rows: samples (rows of the inputs), float32: Keras weights each
            batch's loss by them when it averages an epoch's loss.
    """

    gradients: list
    loss_sum: tf.Tensor
    sample_count: tf.Tensor
    normalizer: tf.Tensor
    rows: tf.Tensor = 0.0


class WindowResult(NamedTuple):
    """What one window reports to the Python loop (one row per window).

    Attributes:
        applied: an update was applied (not skipped by loss scaling).
        verdict: the window's verdict (:mod:`gaviz.training.window.verdicts`):
            ``NOT_DUE``, ``ACCEPTED`` or why it was refused.
        exhausted: the dataset ran out during this window.
        loss: the window's loss: summed loss / divisor + weight regularization.
        sample_count: samples (loss elements) in the window.
        micro_steps: micro-batches in the window, carried ones included.
        consumed: micro-batches this window pulled from the dataset.
        accumulation_steps: the window's ``accumulation_steps`` (k).
        rows: samples (input rows) in the window.
    """

    applied: bool
    verdict: int
    exhausted: bool
    loss: float
    sample_count: float
    micro_steps: int
    consumed: int
    accumulation_steps: int
    rows: float = 0.0

    def pack(self) -> tf.Tensor:
        """One float64 vector (float64 holds every field exactly), read in one copy."""
        return tf.stack([tf.cast(value, tf.float64) for value in self])

    @property
    def due(self) -> bool:
        """The window was full, or a partial window the tail applies."""
        return self.verdict != verdicts.NOT_DUE

    @classmethod
    def read(cls, row) -> "WindowResult":
        """The Python values of a packed row (a numpy vector)."""
        return cls(*(kind(value) for kind, value in zip(_RESULT_TYPES, row)))


def _int(value) -> int:
    return int(round(float(value)))


_RESULT_TYPES = (bool, _int, bool, float, float, _int, _int, _int, float)


def zeros(variables, sparse=frozenset()) -> WindowSums:
    """An empty window for ``variables``: every sum zero; no occurrences yet for
    those in ``sparse`` (by index), whose gradients arrive as ``tf.IndexedSlices``."""
    zero = tf.constant(0.0)
    return WindowSums([Occurrences.empty(v) if i in sparse else tf.zeros(v.shape, sum_dtype(v))
                       for i, v in enumerate(variables)], zero, zero, zero, zero)


def fresh(sums: WindowSums, variables) -> WindowSums:
    """An empty window shaped as ``sums``: zeros, and no occurrences where it holds them."""
    return zeros(variables, sparse_in(sums))


def sparse_in(sums: WindowSums) -> frozenset:
    """The variables (by index) whose window holds occurrences."""
    return frozenset(i for i, g in enumerate(sums.gradients) if isinstance(g, Occurrences))


def gathered(sums: WindowSums, variables) -> WindowSums:
    """``sums`` with each variable's occurrences gathered into one ``tf.IndexedSlices``
    (a window's end, before it is reduced across replicas and finished)."""
    return sums._replace(gradients=[g.gathered(v) if isinstance(g, Occurrences) else g
                                    for g, v in zip(sums.gradients, variables)])


def add(sums: WindowSums, micro: WindowSums) -> WindowSums:
    """Adds one micro-batch's sums into the window's (gradients cast to the sums'
    dtype): a sparse gradient's occurrences after the window's, in order; any
    other gradient into the dense sum (see :func:`densify`)."""
    return WindowSums(
        [_added(a, g) for a, g in zip(sums.gradients, micro.gradients)],
        sums.loss_sum + micro.loss_sum,
        sums.sample_count + micro.sample_count,
        sums.normalizer + micro.normalizer,
        sums.rows + micro.rows,
    )


def _added(total, gradient):
    if isinstance(total, Occurrences):
        return total.pushed(gradient)
    if isinstance(total, tf.IndexedSlices):  # gathered occurrences (a micro-batch's, or a window's)
        return concatenated(total, gradient)
    return total + densify(gradient, total, total.dtype)


def of_mean(gradients, count, variables, replicas: int = 1) -> WindowSums:
    """What a micro-batch adds, given the gradients of its loss that is a mean
    over ``count`` items: ``count * gradient``, the gradient of its summed loss
    (None, a variable the loss does not reach, adds zeros; sparse gradients
    stay sparse until :func:`add`). The loss itself is not known here (0).

    ``replicas``: a replica's loss divided by the number of replicas (as
    Keras's losses do under a strategy) is brought back to its sum by
    ``count * replicas``; the count added is still ``count``.
    """
    count = tf.cast(count, tf.float32)
    scale = count * float(replicas)
    summed = []
    for g, v in zip(gradients, variables):
        dtype = sum_dtype(v)
        if g is None:
            summed.append(tf.zeros(v.shape, dtype))
        elif isinstance(g, tf.IndexedSlices):
            values = tf.math.multiply_no_nan(tf.cast(g.values, dtype), tf.cast(scale, dtype))
            summed.append(tf.IndexedSlices(values, g.indices, g.dense_shape))
        else:
            # An empty replica share (count 0) adds zeros, even where its
            # loss's 0/0 made the gradient NaN.
            summed.append(tf.math.multiply_no_nan(tf.cast(g, dtype), tf.cast(scale, dtype)))
    zero = tf.constant(0.0)
    return WindowSums(summed, zero, count, count, zero)


def densify(gradient, like, dtype):
    """``gradient`` as a dense tensor of ``like``'s shape, in ``dtype``.

    A ``tf.IndexedSlices`` whose window holds a dense sum (its variable's
    gradient was dense when the window was made: see
    :mod:`gaviz.training.loss.sparse_gradients`) has its rows added here,
    duplicates included: the textbook gradient of the summed loss.
    """
    if isinstance(gradient, tf.IndexedSlices):
        values = tf.cast(gradient.values, dtype)
        return tf.math.unsorted_segment_sum(values, gradient.indices, tf.shape(like)[0])
    return tf.cast(gradient, dtype)


def divide(gradients, divisor, regularization_gradients=None) -> list:
    """The window's gradient: summed gradients over the divisor, plus regularization.

    ``g = sum / divisor + grad(penalty)``. A zero divisor (an empty window)
    gives zeros, never NaN. Occurrences (``tf.IndexedSlices``) have their
    values divided; a regularization gradient None adds nothing (the weight
    penalty reaches no variable whose gradient is sparse: its dense gradient
    would make ``Model.fit``'s dense too).
    """
    grads = _divide(gradients, divisor)
    if regularization_gradients is not None:
        grads = [g if r is None else g + tf.cast(r, g.dtype)
                 for g, r in zip(grads, regularization_gradients)]
    return grads


def _divide(tensors, divisor) -> list:
    """Each tensor over ``divisor``, a zero divisor read as 1: an empty
    window's sums are zeros, so it gives zeros, never NaN (a NaN in the sums
    stays NaN, for :func:`all_finite` to see).

    A true division by a divisor made safe once, not ``tf.math.divide_no_nan``:
    its kernel tests every entry and, on a CPU, takes about 4x a plain
    division, on a small model a sixth of an epoch
    (benchmarks/profile_dispatch.py). Not a ``tf.cond`` either: its branch
    outputs all stay alive together, about two more copies of the weights at
    the window's peak (tests/test_benchmarks.py).
    """
    divisor = tf.convert_to_tensor(divisor)
    safe = tf.where(tf.equal(divisor, 0), tf.ones_like(divisor), divisor)
    return [divided(t, safe) for t in tensors]


def all_finite(loss, gradients):
    """True when the loss and every gradient entry are finite.

    One ``is_finite`` pass over each tensor, once per window. (The cheaper
    ``is_finite(reduce_sum(x * 0))`` let a NaN window through under
    TensorFlow 2.16.2: tests/training/test_training_contract.py, in make test-oldest.)
    """
    checks = [tf.reduce_all(tf.math.is_finite(tf.cast(loss, tf.float32)))]
    checks += [tf.reduce_all(tf.math.is_finite(entries(g))) for g in gradients]
    return tf.reduce_all(tf.stack(checks))
