"""A model's own ``compute_loss`` (Keras 3's documented way to customise the
loss), accumulated exactly where it can be.

``Model.fit`` calls ``compute_loss(x, y, y_pred, sample_weight)`` once per
big batch. The trainer calls it once per micro-batch and weighs each value by
the micro-batch's rows, then divides the window by its rows. That equals the
big batch's value, and its gradient, exactly when the override returns

    a mean over the batch's rows of per-row terms,
    plus terms that do not depend on the batch (weight penalties, constants),

which Keras's own ``compute_loss`` does for losses that are means over samples
(``super().compute_loss(...)`` plus anything of that form keeps it). A loss
divided by something else (tokens under a mask, a batch statistic such as a
contrastive loss, a sum over rows) is not: the trainer refuses such an
override by name, from a check on the first micro-batch (its value against
the row-weighted mean of its two halves).
"""

from __future__ import annotations

import inspect

import numpy as np
import tensorflow as tf

from gaviz.training.objective import MicroLoss

#: How far (relative) the whole micro-batch's value may be from its halves'.
ROW_MEAN_TOLERANCE = 1e-4


class OwnLoss:
    """A model's overridden ``compute_loss``, as per-micro-batch sums over rows.

    Args:
        model: a ``keras.Model`` whose class overrides ``compute_loss``.
        owner: the class that overrides it (named in messages).
    """

    normalize = "samples"  # a window is divided by its rows
    #: Keras's compute_loss adds model.losses (the weight penalty among them).
    includes_weight_penalty = True

    def __init__(self, model, owner: str):
        self.model, self.owner = model, owner
        self._training_arg = "training" in inspect.signature(model.compute_loss).parameters

    def value(self, x, y, y_pred, sample_weight):
        """The override's loss of one batch (as Keras's ``_compute_loss`` calls it)."""
        if self._training_arg:
            return self.model.compute_loss(x, y, y_pred, sample_weight, training=True)
        return self.model.compute_loss(x, y, y_pred, sample_weight)

    def micro(self, x, y, y_pred, sample_weight) -> MicroLoss:
        """The micro-batch's value times its rows, counted by rows."""
        rows = tf.cast(tf.shape(tf.nest.flatten(y_pred)[0])[0], tf.float32)
        value = tf.cast(self.value(x, y, y_pred, sample_weight), tf.float32)
        return MicroLoss(value * rows, rows, rows, rows, [])

    def check(self, x, y, y_pred, sample_weight) -> None:
        """Refuses an override that is not a mean over rows, tried on one batch.

        Raises:
            ValueError: the batch's value is not the row-weighted mean of its
                two halves' values.
        """
        rows = int(tf.shape(tf.nest.flatten(y_pred)[0])[0])
        gap = not_a_row_mean(lambda part: self._float(x, y, y_pred, sample_weight, part), rows)
        if gap is None:
            return
        whole, weighted = gap
        raise ValueError(
            f"`model` overrides compute_loss ({self.owner}.compute_loss) with a loss that "
            f"is not a mean over the batch's rows: on a micro-batch of {rows} rows it gives "
            f"{whole:.6g}, but the row-weighted mean of its two halves gives {weighted:.6g}. "
            "The trainer weighs each micro-batch's compute_loss by its rows, which equals "
            "Model.fit on the big batch only for a mean over rows (plus terms that do not "
            "depend on the batch, such as weight penalties). Return such a mean (e.g. "
            "super().compute_loss(...) plus per-row means), pass the loss to compile as a "
            "keras.losses.Loss (masks and token counts are then exact), or train with "
            "Model.fit."
        )

    def _float(self, x, y, y_pred, sample_weight, rows: slice) -> float:
        weights = None if sample_weight is None else rows_of(sample_weight, rows)
        value = self.value(rows_of(x, rows), rows_of(y, rows), rows_of(y_pred, rows), weights)
        return float(np.asarray(value, dtype="float64"))


def not_a_row_mean(value_of, rows: int):
    """``(whole, weighted)`` where a batch's value is not the row-weighted mean
    of its two halves' values (a loss that is not a mean over rows), else None.

    Args:
        value_of: ``slice -> float``, the value on those rows of the batch.
        rows: the batch's rows (fewer than 2: nothing to compare, None).
    """
    if rows < 2:
        return None
    half = rows // 2
    whole = value_of(slice(None))
    weighted = (half * value_of(slice(None, half))
                + (rows - half) * value_of(slice(half, None))) / rows
    if abs(whole - weighted) <= ROW_MEAN_TOLERANCE * max(1.0, abs(whole)):
        return None
    return whole, weighted


def rows_of(nest, rows: slice):
    """The ``rows`` of every tensor in ``nest``."""
    return tf.nest.map_structure(lambda tensor: tensor[rows], nest)
