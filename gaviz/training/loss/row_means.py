"""Is a loss a mean over the batch's rows? The check behind a model's own
``compute_loss`` (:mod:`gaviz.training.loss.own_loss`) and its ``add_loss``
(:mod:`gaviz.training.loss.added_loss`).

The trainer weighs such a loss of each micro-batch by the micro-batch's rows
and divides the window by its rows. That equals ``Model.fit`` on the big
batch exactly when the loss is *row-additive*: a mean over rows of per-row
terms, plus terms that do not depend on the batch. Then, on any set of rows,

    loss(rows) == mean over those rows of loss(one row)

A loss divided by something else does not hold this: a mean over real
tokens weighs each row by its tokens, a batch statistic (a contrastive
loss's in-batch negatives, a router's balance) couples the rows.

The identity is tested on a probe of rows drawn from across the data, not
only from the first micro-batch (:meth:`Feed.probe` in
:mod:`gaviz.training.data.feeds`), and under variations that leave a row mean a
row mean but pull a token mean or a weighted mean away from one: each row's
sample weights scaled by a different factor, and each row's predictions
moved by noise of a different size (a model at its initial weights makes
nearly the same loss on every row, where a token mean and a row mean are
nearly equal). A token mean is then found whenever two probed rows hold
different numbers of real tokens, whatever the first micro-batch holds.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf
from keras import tree

from gaviz import _keras

#: Rows of the probe the identity is checked on, one by one.
PROBE_ROWS = 16
#: How far (relative) a loss may be from the mean of its rows' losses.
TOLERANCE = 1e-4


class Batch(NamedTuple):
    """What a loss is a function of: inputs, targets, predictions, sample weights
    (``y``, ``y_pred`` and ``sample_weight`` may be None)."""

    x: object
    y: object = None
    y_pred: object = None
    sample_weight: object = None


def probe_batch(element, model) -> Batch:
    """A probe's rows ``(x, y[, sample_weight])`` with ``model``'s predictions on them."""
    x, y, *weights = element
    return Batch(x, y, model(x, training=False), weights[0] if weights else None)


class Gap(NamedTuple):
    """A probe on which a loss is not the mean of its rows' losses."""

    rows: int
    whole: float
    row_mean: float
    variation: str  # the variation of the probe it showed under, in words


def first_gap(value_of: Callable[[Batch], float], batch: Batch) -> Gap | None:
    """Where ``value_of`` (a batch's loss, as a float) is not the mean of its
    rows' values on ``batch`` or on one of its variations (None: nowhere).

    A variation whose values are not all finite (noise taking a probability
    out of [0, 1], say) is skipped.
    """
    rows = min(count_rows(batch), PROBE_ROWS)
    if rows < 2:
        return None
    batch = rows_of(batch, slice(0, rows))
    for variation, vary in VARIATIONS:
        varied = vary(batch, rows)
        if varied is None:
            continue
        whole = value_of(varied)
        singles = [value_of(rows_of(varied, slice(i, i + 1))) for i in range(rows)]
        if not all(math.isfinite(v) for v in [whole, *singles]):
            continue
        row_mean = sum(singles) / rows
        if abs(whole - row_mean) > TOLERANCE * max(1.0, abs(whole)):
            return Gap(rows, whole, row_mean, variation)
    return None


def count_rows(batch: Batch) -> int:
    return int(tf.shape(tree.flatten(batch.x)[0])[0])


def rows_of(nest, rows: slice):
    """The ``rows`` of every tensor in ``nest``, each with its Keras mask (a
    mask attached to a model's output, which Keras's losses read) sliced too."""

    def part(tensor):
        if tensor is None:
            return None
        sliced = tensor[rows]
        mask = _keras.get_keras_mask(tensor)
        if mask is not None:
            _keras.set_keras_mask(sliced, mask[rows])
        return sliced

    return tree.map_structure(part, nest)


def _as_it_is(batch: Batch, rows: int) -> Batch:
    return batch


def _weights_scaled(batch: Batch, rows: int) -> Batch | None:
    """Each row's sample weights times its own factor (1, 2, 3, 4, 1, ...):
    a row mean stays one, a mean over weights or tokens does not."""
    if batch.sample_weight is None:
        return None
    factors = np.array([1 + i % 4 for i in range(rows)], np.float32)

    def scaled(weights):
        weights = tf.convert_to_tensor(weights)
        shape = [rows] + [1] * (weights.shape.rank - 1)
        return weights * tf.cast(tf.reshape(factors, shape), weights.dtype)

    return batch._replace(sample_weight=tree.map_structure(scaled, batch.sample_weight))


def _predictions_moved(batch: Batch, rows: int) -> Batch | None:
    """Each row's predictions plus seeded noise of its own size (0 to 3 times
    their spread, at least 1): rows whose losses differ, as a trained model's do."""
    if batch.y_pred is None:
        return None
    rng = np.random.default_rng(0)

    def moved(prediction):
        if not prediction.dtype.is_floating:
            return prediction
        values = tf.cast(prediction, tf.float32)
        spread = max(1.0, float(tf.math.reduce_std(values)))
        sizes = np.array([spread * (i % 4) for i in range(rows)], np.float32)
        sizes = sizes.reshape([rows] + [1] * (values.shape.rank - 1))
        noise = rng.standard_normal(values.shape).astype(np.float32)
        result = tf.cast(values + sizes * noise, prediction.dtype)
        mask = _keras.get_keras_mask(prediction)
        if mask is not None:
            _keras.set_keras_mask(result, mask)
        return result

    return batch._replace(y_pred=tree.map_structure(moved, batch.y_pred))


#: The variations the identity is checked under, in order.
VARIATIONS = (
    ("as it is", _as_it_is),
    ("with each row's sample weights scaled by its own factor", _weights_scaled),
    ("with each row's predictions moved by its own amount", _predictions_moved),
)
