"""A loss as sums: per-element losses times their weights, summed, with the
count of what was summed (:func:`weighted_loss_sum`), so that a window can
add micro-batches' losses and divide once."""

from __future__ import annotations

import tensorflow as tf


def weighted_loss_sum(per_sample_losses, sample_weight=None, mask=None):
    """Sums per-sample losses times their weights; counts samples and weight.

    Args:
        per_sample_losses: tensor of shape ``(batch, ...)``: one loss per
            sample (or per token, per pixel...).
        sample_weight: optional tensor broadcastable to ``per_sample_losses``
            once trailing axes are added; ``(batch,)``, ``(batch, 1)`` or the
            full shape.
        mask: optional boolean tensor of the losses' shape (a Keras mask:
            ``Embedding(mask_zero=True)``, ``ignore_class``): masked elements
            add nothing and are not counted.

    Returns:
        ``(loss_sum, sample_count, weight_sum)``, float32 scalars.
        ``sample_count`` is the number of unmasked loss elements, the divisor
        of Keras's ``sum_over_batch_size``; ``weight_sum`` is the total weight
        over those elements (the number of real tokens when weights mask
        padding), equal to ``sample_count`` without weights.
    """
    losses = tf.cast(per_sample_losses, tf.float32)
    weight = None if sample_weight is None else _weights_like(sample_weight, losses)
    if mask is not None:
        valid = tf.cast(tf.broadcast_to(_like(mask, losses), tf.shape(losses)), tf.float32)
        weight = valid if weight is None else weight * valid
        count = tf.reduce_sum(valid)
    else:
        count = tf.cast(tf.size(per_sample_losses), tf.float32)
    if weight is None:
        return tf.reduce_sum(losses), count, count
    return tf.reduce_sum(losses * weight), count, tf.reduce_sum(weight)


def _weights_like(sample_weight, losses):
    """Sample weights broadcast to the losses' shape, float32."""
    weight = _like(tf.cast(sample_weight, tf.float32), losses)
    return tf.broadcast_to(weight, tf.shape(losses))


def _like(values, losses):
    """``values`` with the losses' rank: (batch,) gains trailing axes, (batch, 1) loses one."""
    while values.shape.rank is not None and values.shape.rank < losses.shape.rank:
        values = tf.expand_dims(values, -1)
    if values.shape.rank is not None and values.shape.rank > losses.shape.rank:
        values = tf.reshape(values, tf.shape(losses))
    return values
