"""A loss as sums: weights of every shape, masks, and what is counted."""

import numpy as np
import pytest
import tensorflow as tf

from gaviz.training.loss import weighted_losses


@pytest.mark.parametrize(
    "weight, expected_sum, expected_weight",
    [
        (np.array([1.0, 0.0]), 1 + 2 + 3, 3.0),  # (b,) against (b, t): one weight per row
        (np.array([[1.0], [0.0]]), 1 + 2 + 3, 3.0),  # (b, 1) likewise
        (np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]), 1 + 2, 2.0),  # (b, t): a padding mask
    ],
)
def test_weighted_loss_sum_takes_weights_of_every_shape(weight, expected_sum, expected_weight):
    losses = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    loss_sum, count, weight_sum = weighted_losses.weighted_loss_sum(losses, weight)
    assert loss_sum.numpy() == expected_sum
    assert count.numpy() == 6.0  # loss elements, whatever the weights
    assert weight_sum.numpy() == expected_weight


def test_weighted_loss_sum_drops_a_trailing_axis_of_weights():
    loss_sum, count, weight_sum = weighted_losses.weighted_loss_sum(
        tf.constant([2.0, 4.0]), np.array([[0.5], [1.0]]))
    assert (loss_sum.numpy(), count.numpy(), weight_sum.numpy()) == (5.0, 2.0, 1.5)
