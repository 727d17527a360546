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
override by name, before training, from a check on rows drawn from across
the data (:mod:`gaviz.training.loss.row_means`). The override may make its own
targets (``fit(x)`` with no ``y``, as a contrastive model's does): it is given
``y=None``, as ``Model.fit`` gives it.
"""

from __future__ import annotations

import inspect

import numpy as np
import tensorflow as tf

from gaviz.training.loss import row_means
from gaviz.training.loss.objective import MicroLoss


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

    def check(self, probe: row_means.Batch) -> None:
        """Refuses an override that is not a mean over rows, tried on ``probe``
        (rows from across the data, with the model's predictions on them).

        Raises:
            ValueError: on the probe (or a variation of it) the override's
                value is not the mean of its values on each row alone.
        """
        gap = row_means.first_gap(self._float, probe)
        if gap is None:
            return
        raise ValueError(
            f"`model` overrides compute_loss ({self.owner}.compute_loss) with a loss that "
            f"is not a mean over the batch's rows: on {gap.rows} rows of the data "
            f"({gap.variation}) it gives {gap.whole:.6g}, but the mean of its values on "
            f"each row alone is {gap.row_mean:.6g}. It divides by something else (real "
            "tokens, a total weight) or couples the rows (a contrastive loss, a batch "
            "statistic). The trainer weighs each micro-batch's compute_loss by its rows, "
            "which equals Model.fit on the big batch only for a mean over rows (plus terms "
            "that do not depend on the batch, such as weight penalties). Return such a mean "
            "(e.g. super().compute_loss(...) plus per-row means), pass the loss to compile "
            "as a keras.losses.Loss (masks and token counts are then exact), or train with "
            "Model.fit."
        )

    def _float(self, batch: row_means.Batch) -> float:
        value = self.value(batch.x, batch.y, batch.y_pred, batch.sample_weight)
        return float(np.asarray(value, dtype="float64"))
