"""Layers whose output for one sample depends on the other samples of its batch.

Accumulation reproduces a big batch's gradient only when every sample's loss
depends on that sample alone. A trainer made for a model with such a layer
says so once, by name, at run time (see :mod:`gaviz.gallery.batchnorm` for why and
for :func:`gaviz.batch_dependence`, which measures the difference).
"""

from __future__ import annotations

import warnings

import keras
import numpy as np

from gaviz import _keras

#: In training, these normalize with the statistics of the batch they are given.
BATCH_DEPENDENT = (keras.layers.BatchNormalization,)


def batch_dependent_layers(model) -> list[str]:
    """The names of ``model``'s layers that see each micro-batch's statistics."""
    return [layer.name for layer in _keras.flatten_layers(model)
            if isinstance(layer, BATCH_DEPENDENT) and layer.trainable]


#: The start of the warning (to filter it where the difference is the point).
WARNING_START = "`model` has BatchNormalization layers"


def warn_batch_dependent(model, accumulation_steps, stacklevel: int = 3) -> None:
    """Warns if ``model`` has batch-dependent layers and windows hold more than
    one micro-batch (nothing otherwise)."""
    names = batch_dependent_layers(model)
    if not names or accumulation_steps == 1:
        return
    warnings.warn(
        f"{WARNING_START} ({', '.join(names)}): in training each "
        "normalizes a micro-batch with that micro-batch's own mean and variance, not the "
        f"effective batch's, and updates its moving statistics once per micro-batch, so "
        f"the weights are not those of Model.fit on batches {accumulation_steps} times "
        "larger. gaviz.batch_dependence measures the difference; LayerNormalization or "
        "GroupNormalization accumulate exactly; a larger micro-batch narrows the gap.",
        UserWarning,
        stacklevel=stacklevel,
    )


def seed_state(variable) -> bool:
    """Whether ``variable`` is a random layer's seed state (a ``SeedGenerator``'s):
    it moves with each draw, so it is random state, not something trained."""
    return "seed_generator" in variable.path


def watched_variables(model) -> list:
    """``model``'s non-trainable variables that a layer may update in training,
    BatchNormalization's (warned about above) and random layers' seed states
    (statistical, like Dropout) left out."""
    skipped = {id(v) for layer in _keras.flatten_layers(model)
               if isinstance(layer, BATCH_DEPENDENT) for v in layer.variables}
    return [v for v in model.non_trainable_variables
            if id(v) not in skipped and not seed_state(v)]


class StateWatch:
    """Finds layers that update their own non-trainable variables in training
    (a running mean, a counter): once per micro-batch under accumulation, once
    per batch under Model.fit. BatchNormalization layers (warned about above)
    and random layers' seed states (statistical, like Dropout) are left out.

    Snapshot before training, :meth:`check` after the first graph call.
    """

    def __init__(self, model):
        self.variables = watched_variables(model)
        self.before = [np.array(v.numpy()) for v in self.variables]

    def changed(self) -> list[str]:
        """The paths of the watched variables whose values changed since the snapshot."""
        return [v.path for v, before in zip(self.variables, self.before)
                if not np.array_equal(v.numpy(), before)]

    def check(self, accumulation_steps, stacklevel: int = 3) -> None:
        """Warns, naming the variables, if training changed any (and k > 1)."""
        names = self.changed()
        if not names or accumulation_steps == 1:
            return
        warnings.warn(
            f"`model` updates non-trainable variables while it trains ({', '.join(names)}): "
            "a layer's call changes them on every training call, so here once per "
            f"micro-batch ({accumulation_steps} per update), where Model.fit on the big "
            "batch changes them once per update, from statistics of the whole batch. The "
            "weights then differ from Model.fit's. Update such state from a callback once "
            "per update, or freeze it (trainable=False) while accumulating.",
            UserWarning,
            stacklevel=stacklevel,
        )
