"""The built-in demo problem: synthetic, deterministic and offline.

A smooth nonlinear regression in 8 dimensions, learned by a small MLP. It is
made from a seed on the spot (nothing is downloaded), trains in seconds on a
laptop CPU, and has no batch-dependent layers, so exact accumulation gives
exactly the weights of big-batch training.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gaviz._arguments import check_one_of

FEATURES = 8


def make_data(samples: int = 4096, seed: int = 0, noise: float = 0.1):
    """Returns ``(x, y)`` float32 arrays of shapes ``(samples, 8)`` and ``(samples, 1)``.

    ``y = sin(2 x0) + x1 x2 - 0.5 x3^2 + 0.3 x4 + noise``; the remaining
    features are distractors.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, FEATURES)).astype("float32")
    y = np.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] - 0.5 * x[:, 3] ** 2 + 0.3 * x[:, 4]
    y = y + noise * rng.normal(size=samples)
    return x, y.reshape(-1, 1).astype("float32")


def make_model(seed: int = 0, hidden: int = 64) -> keras.Model:
    """A seeded MLP 8-hidden-hidden-1 (tanh); the same seed gives the same weights."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(hidden, activation="tanh"),
            keras.layers.Dense(hidden, activation="tanh"),
            keras.layers.Dense(1),
        ],
        name="demo_mlp",
    )


def make_dataset(x, y, micro_batch_size: int) -> tf.data.Dataset:
    """Micro-batches in a fixed order (no shuffling: runs stay comparable)."""
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(micro_batch_size).prefetch(2)


#: Named demo problems for the dashboard: samples and hidden width.
PRESETS = {
    "regression": {"samples": 4096, "hidden": 64},
    "small": {"samples": 1024, "hidden": 32},
    "wide": {"samples": 4096, "hidden": 256},
}


OPTIMIZERS = {
    "sgd": lambda lr: keras.optimizers.SGD(lr),
    "momentum": lambda lr: keras.optimizers.SGD(lr, momentum=0.9),
    "adam": lambda lr: keras.optimizers.Adam(lr),
}


def make_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
    """A fresh optimizer by name: one of ``OPTIMIZERS``."""
    return OPTIMIZERS[check_one_of("optimizer", name, OPTIMIZERS)](learning_rate)


def make_token_data(
    sequences: int = 96,
    max_length: int = 12,
    features: int = 6,
    vocabulary: int = 5,
    seed: int = 0,
):
    """A toy token-level task with variable-length, padded sequences.

    Each position's label is the argmax of a fixed random projection of its
    features, so it is learnable; sequences have 1 to ``max_length`` real
    tokens and are padded to ``max_length``.

    Returns:
        ``(x, y, mask)``: float32 ``(sequences, max_length, features)``,
        int32 ``(sequences, max_length)`` labels, and a float32 mask of the
        same shape, 1 on real tokens and 0 on padding: use it as
        ``sample_weight`` with ``normalize="weights"`` to average over real
        tokens.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(sequences, max_length, features)).astype("float32")
    projection = rng.normal(size=(features, vocabulary))
    y = np.argmax(x @ projection, axis=-1).astype("int32")
    lengths = rng.integers(1, max_length + 1, size=sequences)
    mask = (np.arange(max_length)[None, :] < lengths[:, None]).astype("float32")
    x = x * mask[..., None]
    return x, y, mask


def make_token_model(max_length: int = 12, features: int = 6, vocabulary: int = 5, seed: int = 0):
    """A per-token classifier (logits) for :func:`make_token_data`."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((max_length, features)),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(vocabulary),
        ],
        name="token_classifier",
    )
