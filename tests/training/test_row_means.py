"""The check that a loss is a mean over the batch's rows (gaviz.training.loss.row_means):
it holds for row means whatever the rows hold, and finds a token mean and a batch
statistic, also where the rows at hand look alike."""

import numpy as np
import tensorflow as tf

from gaviz import _keras
from gaviz.training.loss import row_means
from gaviz.training.loss.row_means import Batch

ROWS = 8


def batch(tokens_per_row, weights=True):
    """Rows of 6 positions, the first ``tokens_per_row[i]`` of row i real."""
    real = np.arange(6)[None] < np.asarray(tokens_per_row)[:, None]
    rng = np.random.default_rng(0)
    y_pred = tf.constant(rng.normal(size=(len(tokens_per_row), 6)).astype("float32") * 0.01)
    y = tf.constant(np.zeros((len(tokens_per_row), 6), "float32"))
    weight = tf.constant(real.astype("float32")) if weights else None
    return Batch(y_pred, y, y_pred, weight)


def per_row(b):
    """Each row's weighted squared error summed over positions."""
    weight = 1.0 if b.sample_weight is None else b.sample_weight
    return tf.reduce_sum(weight * tf.square(b.y_pred - b.y), axis=1)


def row_mean(b):
    return float(tf.reduce_mean(per_row(b)))


def token_mean(b):
    return float(tf.reduce_sum(per_row(b)) / tf.reduce_sum(b.sample_weight))


def batch_statistic(b):
    return float(tf.math.reduce_variance(tf.reduce_mean(b.y_pred, axis=1)))


def test_a_row_mean_passes_whatever_the_rows_hold():
    for tokens in ([3] * ROWS, [1, 6, 2, 5, 3, 4, 6, 1]):
        assert row_means.first_gap(row_mean, batch(tokens)) is None


def test_a_token_mean_is_found_when_rows_hold_different_tokens():
    gap = row_means.first_gap(token_mean, batch([1, 6, 2, 5, 3, 4, 6, 1]))
    assert gap is not None and gap.rows == ROWS


def test_a_token_mean_near_a_row_mean_is_found_by_varying_the_rows():
    """At initial weights every row makes nearly the same loss (here 1e-4 apart):
    a token mean is then a row mean to five digits, until each row's weights or
    predictions are moved by their own amount."""
    gap = row_means.first_gap(token_mean, batch([2, 4, 4, 2, 2, 4, 4, 2]))
    assert gap is not None and gap.variation != "as it is"


def test_a_token_mean_over_rows_that_all_hold_the_same_tokens_is_a_row_mean():
    # Nothing can tell them apart, and on such data they are the same number.
    assert row_means.first_gap(token_mean, batch([3] * ROWS)) is None


def test_a_batch_statistic_is_found():
    assert row_means.first_gap(batch_statistic, batch([3] * ROWS, weights=False)) is not None


def test_masks_travel_with_the_rows_they_belong_to():
    values = tf.ones((4, 3))
    mask = tf.constant([[True, False, True]] * 4)
    _keras.set_keras_mask(values, mask)
    part = row_means.rows_of(values, slice(1, 3))
    assert _keras.get_keras_mask(part).shape == (2, 3)
