import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import pytest


def make_mlp(seed=1, inputs=5, hidden=8, outputs=1, **dense_kwargs):
    """A small tanh MLP with seeded initial weights (no batch-dependent layers)."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(hidden, activation="tanh", **dense_kwargs),
            keras.layers.Dense(outputs, **dense_kwargs),
        ]
    )


@pytest.fixture
def regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(100, 1))).astype("float32")
    return x, y
