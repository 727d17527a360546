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

Nothing here owns a variable: the trainer keeps the running sums in
``tf.Variable``s and calls these functions on their values.
"""

from __future__ import annotations

import tensorflow as tf


def weighted_loss_sum(per_sample_losses, sample_weight=None):
    """Sums per-sample losses times their weights; counts samples and weight.

    Args:
        per_sample_losses: tensor of shape ``(batch, ...)``: one loss per
            sample (or per token, per pixel...).
        sample_weight: optional tensor broadcastable to ``per_sample_losses``
            once trailing axes are added; ``(batch,)`` or the full shape.

    Returns:
        ``(loss_sum, sample_count, weight_sum)``, float32 scalars.
        ``sample_count`` is the number of loss elements, the divisor of Keras's
        ``sum_over_batch_size``; ``weight_sum`` is the total weight over those
        elements (the number of real tokens when weights mask padding), equal
        to ``sample_count`` without weights.
    """
    losses = tf.cast(per_sample_losses, tf.float32)
    count = tf.cast(tf.size(per_sample_losses), tf.float32)
    if sample_weight is None:
        return tf.reduce_sum(losses), count, count
    weight = tf.cast(sample_weight, tf.float32)
    # (batch,) weights against (batch, time) losses: add trailing axes.
    while weight.shape.rank is not None and weight.shape.rank < losses.shape.rank:
        weight = tf.expand_dims(weight, -1)
    # (batch, 1) weights against (batch,) losses: drop the trailing axis.
    if weight.shape.rank is not None and weight.shape.rank > losses.shape.rank:
        weight = tf.reshape(weight, tf.shape(losses))
    weight = tf.broadcast_to(weight, tf.shape(losses))
    return tf.reduce_sum(losses * weight), count, tf.reduce_sum(weight)


def add_gradients(accumulated, gradients):
    """Returns the element-wise sums ``accumulated[i] + gradients[i]`` in float32."""
    return [a + tf.cast(g, a.dtype) for a, g in zip(accumulated, gradients)]


def finish_gradients(accumulated, divisor, regularization_gradients=None):
    """The window's gradient: summed gradients over the divisor, plus regularization.

    The divisor is the window's sample count (or total weight); zero (an
    empty window) gives zeros, never NaN.
    """
    grads = [tf.math.divide_no_nan(a, tf.cast(divisor, a.dtype)) for a in accumulated]
    if regularization_gradients is not None:
        grads = [g + tf.cast(r, g.dtype) for g, r in zip(grads, regularization_gradients)]
    return grads


def all_finite(loss, gradients):
    """True when the loss and every gradient entry are finite (one reduction per tensor)."""
    checks = [tf.reduce_all(tf.math.is_finite(loss))]
    checks += [tf.reduce_all(tf.math.is_finite(g)) for g in gradients]
    return tf.reduce_all(tf.stack(checks))
