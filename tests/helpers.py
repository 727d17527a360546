"""Helpers shared by the tests (fixtures stay in conftest.py; tests import from here)."""

import keras


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
