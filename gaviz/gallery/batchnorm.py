"""Why accumulation does not enlarge the batch BatchNormalization sees.

Accumulating k micro-batches of b samples reproduces the gradient of one
batch of k*b samples only when every sample's loss depends on that sample
alone. BatchNormalization breaks that: in training it normalizes each
micro-batch with the micro-batch's own mean and variance, so the forward
pass, and the gradient, differ from the big batch's; and its moving
statistics are updated once per micro-batch (k times per optimizer update)
from those small-batch estimates.

What to do: LayerNormalization or GroupNormalization normalize each sample
on its own and so accumulate exactly; or keep BatchNormalization and make
the micro-batch large enough for its statistics to be stable.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from gaviz import demo
from gaviz.training.fit import batch_layers, checks
from gaviz.training.trainer import AccumulationTrainer

NORMALIZATIONS = {
    "batch": lambda: keras.layers.BatchNormalization(),
    "layer": lambda: keras.layers.LayerNormalization(),
    "group": lambda: keras.layers.GroupNormalization(groups=4),
    "none": None,
}


def make_normalized_model(normalization: str = "batch", seed: int = 0) -> keras.Model:
    """Demo MLP with a normalization layer after its first Dense layer."""
    checks.check_one_of("normalization", normalization, NORMALIZATIONS)
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((demo.FEATURES,)), keras.layers.Dense(32)]
    if NORMALIZATIONS[normalization] is not None:
        layers.append(NORMALIZATIONS[normalization]())
    layers += [keras.layers.Activation("tanh"), keras.layers.Dense(1)]
    return keras.Sequential(layers, name=f"mlp_{normalization}_norm")


@dataclass
class BatchDependence:
    """One update by accumulation against one update on the same big batch.

    Attributes:
        normalization: the normalization layer in the model.
        update_relative_difference: ``|d_accumulated - d_big| / |d_big|`` for
            the trainable weights' change ``d``; 0 up to rounding when
            accumulation is exact.
        moving_statistics_difference: largest absolute difference in the
            BatchNormalization moving mean and variance after the update
            (None without BatchNormalization).
    """

    normalization: str
    accumulation_steps: int
    micro_batch_size: int
    update_relative_difference: float
    moving_statistics_difference: float | None


def batch_dependence(
    normalization: str = "batch",
    accumulation_steps: int = 4,
    micro_batch_size: int = 16,
    learning_rate: float = 0.1,
    seed: int = 0,
) -> BatchDependence:
    """Measures how far accumulation lands from the big batch for a model.

    Both runs start from the same weights and see the same
    ``accumulation_steps * micro_batch_size`` samples; one accumulates
    micro-batches, the other takes them as one batch (``accumulation_steps=1``).
    """
    x, y = demo.make_data(accumulation_steps * micro_batch_size, seed=seed)
    results = {}
    for steps, batch in ((accumulation_steps, micro_batch_size), (1, len(x))):
        model = make_normalized_model(normalization, seed)
        before = [v.numpy().copy() for v in model.trainable_variables]
        with warnings.catch_warnings():  # the difference it warns of is what this measures
            warnings.filterwarnings("ignore", message=re.escape(batch_layers.WARNING_START))
            trainer = AccumulationTrainer(
                model, keras.optimizers.SGD(learning_rate), "mse", accumulation_steps=steps
            )
        trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch), verbose=0)
        step = np.concatenate(
            [(v.numpy() - b).ravel() for v, b in zip(model.trainable_variables, before)]
        )
        moving = [v.numpy() for v in model.non_trainable_variables]
        results[steps] = (step, moving)
    (step, moving), (big_step, big_moving) = results[accumulation_steps], results[1]
    difference = float(np.linalg.norm(step - big_step) / np.linalg.norm(big_step))
    moving_difference = None
    if normalization == "batch":
        moving_difference = max(float(np.max(np.abs(a - b))) for a, b in zip(moving, big_moving))
    return BatchDependence(
        normalization, accumulation_steps, micro_batch_size, difference, moving_difference
    )
