"""Losses a model's layers add with ``add_loss``, counted as ``Model.fit`` counts them.

``Model.fit`` adds them once per big batch, to the compiled loss (a mean over
the batch's rows, or over its tokens, or a sum). The micro-step takes each as
its micro-batch's value times what the micro-batch's loss divides by (its
``normalizer``: rows, loss elements or total weight; :mod:`gaviz.training.loop.forward_backward`),
and the window divides by its total. At ``accumulation_steps=1`` that is
``Model.fit``'s loss exactly, whatever the added loss is. Over a window of
several micro-batches it is exact when the added loss is

    a mean over the batch's rows of per-row terms,
    plus terms that do not depend on the batch,

(as a Keras loss with its default reduction is, ``sum(w * l) / rows``, and an
activity regularizer) and every micro-batch's loss divides by the same number
per row (rows, or a fixed number of loss elements per row, as a sequence loss
of fixed length does). It is not where the added loss is a statistic over the
whole batch (a mixture of experts' router balance, a sum over rows, a mean
over tokens under a mask), or where the compiled loss's count per row varies
(a mask, ``normalize="weights"``): then the trainer says so at run time, by
name, and trains with each micro-batch's value weighted by its share of the
window's count.

A model compiled without a loss whose only loss is what its layers add
(Keras's "endpoint layer" pattern, often trained on inputs alone,
``fit(x)``) must add a mean over rows: another loss is refused by name, as
such a ``compute_loss`` is (:mod:`gaviz.training.loss.own_loss`).

Where a model adds losses only in training (a router's balance loss is added
when ``training=True``), they are found on a training call whose state
changes (moving statistics, random seeds) are undone.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import NamedTuple

import numpy as np

from gaviz import _keras
from gaviz.training.loop.forward_backward import added_loss_layers, regularized_weights
from gaviz.training.loss import row_means


def may_add_losses(model) -> bool:
    """Whether a layer of ``model`` may add a loss when called: one with an
    activity regularizer, or one of a class from outside Keras (whose ``call``
    may call ``add_loss``). Keras's own layers add no other."""
    return any(
        getattr(layer, "activity_regularizer", None) is not None
        or not type(layer).__module__.startswith("keras.")
        for layer in _keras.flatten_layers(model)
    )


class AddedLosses(NamedTuple):
    """What a model's layers add with ``add_loss``, as a probe found it.

    Attributes:
        layers: the layers that added them (or "an activity regularizer").
        training_only: they are added only when the model is called with
            ``training=True``.
        gap: where their sum is not a mean over rows (None: it is one).
    """

    layers: str
    training_only: bool
    gap: row_means.Gap | None


def find(model, x) -> AddedLosses | None:
    """The losses ``model`` adds when called on the probe rows ``x`` (None: none).

    Called with ``training=False`` first (which updates no layer's state), then,
    if nothing was added, with ``training=True``, each call's state changes undone.
    """
    for training in (False, True):
        if _added(model, x, training) is not None:
            return _found(model, x, training)
    return None


def _found(model, x, training: bool) -> AddedLosses:
    names = ", ".join(added_loss_layers(model)) or "an activity regularizer"
    gap = row_means.first_gap(lambda batch: _added(model, batch.x, training),
                              row_means.Batch(x))
    return AddedLosses(names, training, gap)


def check_only_loss(added: AddedLosses | None) -> None:
    """Refuses the added losses of a model compiled without a loss unless they
    are a mean over rows.

    Raises:
        ValueError: nothing is added, or what is added is not a mean over rows.
    """
    if added is None:
        raise ValueError(
            "`loss` is required: pass it to AccumulationTrainer, compile the model with it "
            "(model.compile(loss=...)), or add it in a layer's call with add_loss. Received: "
            "loss=None, a model compiled without one, and no loss added with add_loss on "
            "rows of the data (called with training=False and with training=True)."
        )
    if added.gap is None:
        return
    gap = added.gap
    raise ValueError(
        f"`model` is compiled without a loss, and the loss its layers add with add_loss "
        f"({added.layers}) is not a mean over the batch's rows: on {gap.rows} rows of the "
        f"data it is {gap.whole:.6g}, but the mean of what it adds on each row alone is "
        f"{gap.row_mean:.6g}. The trainer weighs each micro-batch's added loss by its "
        "rows, which equals Model.fit on the big batch only for a mean over rows (plus "
        "terms that do not depend on the batch). Add such a mean (a keras.losses.Loss "
        "with its default reduction, or a mean over the rows), compile the model with the "
        "loss (model.compile(loss=...)) instead, or train with Model.fit."
    )


def warn_where_inexact(added: AddedLosses | None, accumulates: bool, fixed_per_row: bool,
                       count: str, stacklevel: int = 2) -> None:
    """Says, by name, where added losses next to the compiled loss (or inside
    a model's own compute_loss) cannot be exact over a window.

    Args:
        added: what :func:`find` found.
        accumulates: whether a window may hold more than one micro-batch.
        fixed_per_row: whether every micro-batch's loss divides by the same
            number per row.
        count: what the loss divides by, in words (for the message).
    """
    if added is None or not accumulates:
        return
    when = " (added in training only)" if added.training_only else ""
    if added.gap is not None:
        gap = added.gap
        why = (f"is not a mean over the batch's rows (on {gap.rows} rows of the data it is "
               f"{gap.whole:.6g}, the mean of each row's {gap.row_mean:.6g}): a sum over "
               "rows, or a statistic of the whole batch (a router's balance, in-batch "
               "negatives), which no window of micro-batches reproduces. A sum over rows "
               "can be made a mean: divide it by the batch's rows in call and scale its "
               "coefficient to match")
    elif not fixed_per_row:
        why = (f"is a mean over rows, but the compiled loss divides by {count}, which "
               "varies per row between micro-batches, so the two cannot share one divisor")
    else:
        return
    warnings.warn(
        f"The loss added with add_loss by {added.layers}{when} {why}. With "
        "accumulation_steps > 1 the trainer counts each micro-batch's value weighted by "
        "its share of the window's count, which differs from Model.fit's on the big "
        "batch (at accumulation_steps=1 it is Model.fit's). The rest of the loss, and "
        "everything else, stays exact.",
        InexactAddedLoss,
        stacklevel=stacklevel + 1,
    )


class InexactAddedLoss(UserWarning):
    """A loss added with ``add_loss`` cannot be accumulated exactly over a window.

    Warned when the added loss is a statistic of the whole batch (a router's
    load balance, say) rather than a mean over its rows: summed per micro-batch,
    it is not the big batch's. Training goes on; the warning names the layer."""


def _added(model, x, training: bool) -> float | None:
    """The sum of the losses ``model`` adds when called on ``x`` (None: none).

    ``model.losses`` lists them first, then one penalty per regularized weight.
    """
    with _state_kept(model) if training else contextlib.nullcontext():
        model(x, training=training)
        losses = model.losses
    added = losses[:len(losses) - len(regularized_weights(model))]
    if not added:
        return None
    return float(sum(np.asarray(loss, dtype="float64") for loss in added))


@contextlib.contextmanager
def _state_kept(model):
    """Meanwhile, the model may be called in training: its non-trainable
    variables (moving statistics, random seeds' states) are put back after."""
    variables = model.non_trainable_variables
    saved = [v.numpy() for v in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, saved):
            variable.assign(value)
