"""Does a compiled loss give each row a value of its own? The check behind
every loss the trainer reads with ``Loss.call`` (:mod:`gaviz.training.loss.objective`).

The trainer computes a compiled loss's values on each micro-batch, sums them
(with sample weights and masks) and divides the window once. That equals
``Model.fit`` on the big batch exactly when each row's values depend on that
row alone: then a row's values are the same in a micro-batch of ``b`` rows as
in the big batch of ``k * b``. Keras's classic losses are of that kind.
A loss that *couples* the rows is not: Circle's pairs of rows, a triplet or
contrastive loss with in-batch negatives, a loss that normalizes or ranks
within the batch. A micro-batch sees other rows than the big batch, so no sum
over micro-batches equals the big batch's loss.

Keras's own per-row losses are known (:data:`ROW_WISE`, reviewed against
keras/src/losses/losses.py); any other loss, a function or a ``Loss``
subclass, is checked once before training on rows drawn from across the
data: each row's values among the others against its values alone, as it
is and with each row's predictions moved by its own amount (at initial
weights every row looks alike, and a normalization over the batch hides).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import keras
import numpy as np

from gaviz import _keras
from gaviz.training.loss import row_means

#: Keras's loss functions whose value for a row reads that row alone (along
#: the default ``axis=-1`` where they take one): compile wraps each, and each
#: loss class of the same name, in a ``LossFunctionWrapper``. Not here: circle
#: (pairs of rows), dice and tversky (``axis=None`` reduces over the batch),
#: cosine_similarity (its axis may be the batch's).
ROW_WISE = frozenset({
    keras.losses.binary_crossentropy, keras.losses.binary_focal_crossentropy,
    keras.losses.categorical_crossentropy, keras.losses.categorical_focal_crossentropy,
    keras.losses.categorical_generalized_cross_entropy, keras.losses.categorical_hinge,
    keras.losses.ctc, keras.losses.hinge, keras.losses.huber, keras.losses.kl_divergence,
    keras.losses.log_cosh, keras.losses.mean_absolute_error,
    keras.losses.mean_absolute_percentage_error, keras.losses.mean_squared_error,
    keras.losses.mean_squared_logarithmic_error, keras.losses.poisson,
    keras.losses.sparse_categorical_crossentropy, keras.losses.squared_hinge,
})

#: How far (relative) a row's value may move between its batch and itself alone.
TOLERANCE = row_means.TOLERANCE


class Coupling(NamedTuple):
    """Where a loss's value for a row changed with the rows beside it."""

    rows: int  # rows of the probe
    row: int  # the row whose value changed
    together: float  # its value among the probe's rows (nan: masked out)
    alone: float  # its value on its own (nan: masked out)
    variation: str  # the probe's variation it showed under, in words


def known_row_wise(loss) -> bool:
    """Whether ``loss`` is one of Keras's per-row losses, used as Keras made it."""
    wrapped = _keras.wrapped_function(loss)
    if wrapped is None or type(loss).__call__ is not keras.losses.Loss.__call__:
        return False
    if type(loss).call is not _keras.LossFunctionWrapper.call:
        return False
    function, arguments = wrapped
    return function in ROW_WISE and arguments.get("axis", -1) == -1


def first_coupling(values_of: Callable, batch: row_means.Batch) -> Coupling | None:
    """Where ``values_of(y_true, y_pred) -> (values, mask)`` gives a row other
    values among ``batch``'s rows than alone (None: nowhere).

    A variation under which a row's values are not all finite is skipped.
    """
    rows = min(row_means.count_rows(batch), row_means.PROBE_ROWS)
    if rows < 2:
        return None
    batch = row_means.rows_of(batch, slice(0, rows))
    for variation, vary in row_means.VARIATIONS:
        varied = vary(batch, rows)
        if varied is None or (varied is not batch and varied.y_pred is batch.y_pred):
            continue  # a variation of what values_of does not read
        together = _masked(*values_of(varied.y, varied.y_pred))
        if together.shape[0] != rows:
            return Coupling(rows, 0, math.nan, math.nan, variation)
        for row in range(rows):
            one = row_means.rows_of(varied, slice(row, row + 1))
            alone = _masked(*values_of(one.y, one.y_pred))[0]
            gap = _first_difference(together[row], alone)
            if gap is not None:
                return Coupling(rows, row, *gap, variation)
    return None


def _masked(values, mask) -> np.ndarray:
    """The values as float64, nan where masked out, one row per batch row."""
    values = np.asarray(values, dtype="float64")
    if mask is not None:
        values = np.where(np.broadcast_to(np.asarray(mask, bool), values.shape), values, np.nan)
    return values.reshape(values.shape[0], -1)


def _first_difference(together: np.ndarray, alone: np.ndarray):
    """The first ``(together, alone)`` values of a row that differ, or None."""
    if together.shape != alone.shape:
        return math.nan, math.nan
    if not (np.isfinite(together) | np.isnan(together)).all() \
            or not (np.isfinite(alone) | np.isnan(alone)).all():
        return None  # an infinite value: this variation says nothing
    masked_differ = np.isnan(together) != np.isnan(alone)
    both = ~np.isnan(together) & ~np.isnan(alone)
    far = np.zeros_like(masked_differ)
    far[both] = np.abs(together[both] - alone[both]) > TOLERANCE * np.maximum(
        1.0, np.abs(together[both]))
    where = np.flatnonzero(masked_differ | far)
    if not where.size:
        return None
    return float(together[where[0]]), float(alone[where[0]])


class CoupledLoss(ValueError):
    """A compiled loss whose value for a row depends on the other rows of its batch.

    Attributes:
        loss: the loss's name (its output's, for several outputs).
        coupling: the check's finding (``gaviz.training.loss.row_losses.Coupling``): the
            row whose value changed, among the others and alone.
    """

    def __init__(self, loss, coupling):  # untyped: the docs show no private class
        self.loss, self.coupling = loss, coupling
        super().__init__(
            f"`loss` '{loss}' couples the batch's rows: on {coupling.rows} rows of the data "
            f"({coupling.variation}) {_seen(coupling)}. Its value for a row depends on the "
            "other rows of its batch (pairs or negatives drawn from the batch, a "
            "normalization or ranking over it), so a micro-batch sees other rows than the "
            "big batch and no sum over micro-batches equals Model.fit's loss. "
            "cached_window='auto' (the default) trains it exactly with the cached window: "
            "the loss once on the window's outputs, one more forward pass per micro-batch; "
            "in your own loop, gaviz.cached_gradients does the same beside gaviz.Accumulator "
            "(the guide's 'Losses that couple rows')."
        )


def _seen(coupling: Coupling) -> str:
    if math.isnan(coupling.together) and math.isnan(coupling.alone):
        return "its values are not one per row"
    return (f"row {coupling.row}'s loss is {_value(coupling.together)} among the others and "
            f"{_value(coupling.alone)} on its own")


def _value(value: float) -> str:
    return "masked out" if math.isnan(value) else f"{value:.6g}"
