"""Lesson 05 solution: the exact loss of a window, and the mean of means it is not.

A window's loss is the loss of its effective batch: every weighted per-sample
(or per-token) loss added up, divided once by the window's total weight::

    window_loss = sum_j sum_i w_ji * l_ji / sum_j sum_i w_ji

The mean of means divides each micro-batch by its own weight first and then
averages the k results: equal only when every micro-batch carries the same
total weight.
"""

import numpy as np


def _weights_like(losses, weights):
    """``weights`` broadcast to the shape of ``losses`` (ones when None)."""
    losses = np.asarray(losses, dtype=np.float64)
    if weights is None:
        return np.ones_like(losses)
    weights = np.asarray(weights, dtype=np.float64)
    # (batch,) weights against (batch, tokens) losses: one weight per sequence.
    weights = weights.reshape(weights.shape + (1,) * (losses.ndim - weights.ndim))
    return np.broadcast_to(weights, losses.shape)


def window_loss(per_sample_losses_list, weights_list=None):
    """The exact loss of a window of micro-batches.

    Args:
        per_sample_losses_list: one array per micro-batch of unreduced losses,
            shape ``(batch,)`` or ``(batch, tokens)``; micro-batches may differ
            in size.
        weights_list: one array of sample weights per micro-batch (the same
            shape as its losses, or ``(batch,)``), e.g. a padding mask; None
            for all ones.

    Returns:
        ``sum(w * l) / sum(w)`` over the whole window, as a float.
    """
    if weights_list is None:
        weights_list = [None] * len(per_sample_losses_list)
    total = weight = 0.0
    for losses, weights in zip(per_sample_losses_list, weights_list):
        losses = np.asarray(losses, dtype=np.float64)
        weights = _weights_like(losses, weights)
        total += float(np.sum(losses * weights))
        weight += float(np.sum(weights))
    return total / weight


def mean_of_means(per_sample_losses_list, weights_list=None):
    """The pitfall, for comparison: each micro-batch's weighted mean, averaged over k."""
    if weights_list is None:
        weights_list = [None] * len(per_sample_losses_list)
    means = []
    for losses, weights in zip(per_sample_losses_list, weights_list):
        losses = np.asarray(losses, dtype=np.float64)
        weights = _weights_like(losses, weights)
        means.append(float(np.sum(losses * weights) / np.sum(weights)))
    return float(np.mean(means))
