"""A model whose only loss is what its layers add with ``add_loss``, trained
exactly where it can be.

Keras's "endpoint layer" pattern (keras.io) computes the loss inside a
layer's ``call``, from targets given as inputs, and calls ``add_loss``; the
model is compiled without a loss and ``Model.fit(x)`` trains it, often on
inputs alone (``y=None``).

``Model.fit`` adds such a loss once per big batch. The trainer takes it as
a mean over its micro-batch, weighs it by the micro-batch's rows and
divides the window by its rows (:mod:`gaviz.training.micro_step`). That equals the
big batch's loss, and its gradient, exactly when the added loss is

    a mean over the batch's rows of per-row terms,
    plus terms that do not depend on the batch,

as a Keras loss with its default reduction is (``sum(w * l) / rows``). A
sum over rows, a mean over tokens under a mask or a batch statistic is not:
the trainer refuses such a model by name, from a check on the first
micro-batch (the added loss against the row-weighted mean of its two
halves'), as it refuses such a ``compute_loss`` (:mod:`gaviz.training.own_loss`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gaviz import _keras
from gaviz.training.micro_step import added_loss_layers, regularized_weights
from gaviz.training.own_loss import not_a_row_mean, rows_of


def may_add_losses(model) -> bool:
    """Whether a layer of ``model`` may add a loss when called: one with an
    activity regularizer, or one of a class from outside Keras (whose ``call``
    may call ``add_loss``). Keras's own layers add no other."""
    return any(
        getattr(layer, "activity_regularizer", None) is not None
        or not type(layer).__module__.startswith("keras.")
        for layer in _keras.flatten_layers(model)
    )


def check(model, x) -> None:
    """Checks, on the first micro-batch ``x``, that ``model`` adds a loss and
    that the loss is a mean over the batch's rows (called with
    ``training=False``, which updates no layer's state).

    Raises:
        ValueError: the model adds no loss, or the one it adds on ``x`` is
            not the row-weighted mean of what it adds on ``x``'s two halves.
    """
    whole = _added(model, x)
    if whole is None:
        raise ValueError(
            "`loss` is required: pass it to AccumulationTrainer, compile the model with it "
            "(model.compile(loss=...)), or add it in a layer's call with add_loss. Received: "
            "loss=None, a model compiled without one, and no loss added with add_loss on the "
            "first micro-batch (called with training=False)."
        )
    rows = int(tf.shape(tf.nest.flatten(x)[0])[0])
    gap = not_a_row_mean(lambda part: _added(model, rows_of(x, part)), rows)
    if gap is None:
        return
    whole, weighted = gap
    names = ", ".join(added_loss_layers(model)) or "an activity regularizer"
    raise ValueError(
        f"`model` is compiled without a loss, and the loss its layers add with add_loss "
        f"({names}) is not a mean over the batch's rows: on a micro-batch of {rows} rows "
        f"it is {whole:.6g}, but the row-weighted mean of its two halves' is "
        f"{weighted:.6g}. The trainer weighs each micro-batch's added loss by its rows, "
        "which equals Model.fit on the big batch only for a mean over rows (plus terms "
        "that do not depend on the batch). Add such a mean (a keras.losses.Loss with its "
        "default reduction, or a mean over the rows), compile the model with the loss "
        "(model.compile(loss=...)) instead, or train with Model.fit."
    )


def _added(model, x) -> float | None:
    """The sum of the losses ``model`` adds when called on ``x`` (None: none).

    ``model.losses`` lists them first, then one penalty per regularized weight.
    """
    model(x, training=False)
    losses = model.losses
    added = losses[:len(losses) - len(regularized_weights(model))]
    if not added:
        return None
    return float(sum(np.asarray(loss, dtype="float64") for loss in added))

