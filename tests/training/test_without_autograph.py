"""The trainer's graph code does not depend on AutoGraph, as Keras's train
functions do not (``do_not_convert``).

AutoGraph converts a function by reading its source again, and when that fails
it runs the function as it is, with a warning. Graph code that relied on the
conversion (a Python ``if`` or ``and`` on a tensor) then fails with
``OperatorNotAllowedInGraphError``, only in the process where the conversion
failed: this is how the browser walk failed, now and then, in a lesson's
``trainer.fit``. gaviz's loops and decisions are ``tf.while_loop`` and
``tf.cond``, so nothing rests on a conversion.
"""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import make_mlp
from tensorflow.python.autograph.impl import conversion
from tensorflow.python.autograph.pyct import cache

import gaviz

X = np.random.default_rng(0).normal(size=(50, 5)).astype("float32")
Y = X[:, :1] * 2.0 - X[:, 1:2]


@pytest.fixture
def autograph_converts_no_gaviz_function(monkeypatch):
    """AutoGraph runs every gaviz function as it is, as when its conversion fails."""
    original = conversion.is_allowlisted

    def is_allowlisted(entity, *args, **kwargs):
        module = getattr(entity, "__module__", None) or ""
        return module.startswith("gaviz") or original(entity, *args, **kwargs)

    monkeypatch.setattr(conversion, "is_allowlisted", is_allowlisted)
    # What AutoGraph runs as it is, it remembers: keep that to this test.
    monkeypatch.setattr(conversion, "_ALLOWLIST_CACHE", cache.UnboundInstanceCache())


def fit(data, tail="flush", optimizer=None):
    trainer = gaviz.AccumulationTrainer(make_mlp(), optimizer or keras.optimizers.Adam(0.01),
                                        "mse", accumulation_steps=3, tail=tail)
    if data == "dataset":
        history = trainer.fit(tf.data.Dataset.from_tensor_slices((X, Y)).batch(4), epochs=2,
                              verbose=0)
    else:
        history = trainer.fit(X, Y, batch_size=4, epochs=2, verbose=0)
    return trainer, history


CASES = {
    "dataset": dict(data="dataset"),
    "arrays": dict(data="arrays"),
    "carried tail": dict(data="arrays", tail="carry"),
    "loss scaling": dict(data="dataset",
                         optimizer=lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))),
}


@pytest.mark.parametrize("case", CASES)
def test_fit_gives_the_same_weights_when_autograph_converts_nothing_of_gaviz(case, request):
    arguments = dict(CASES[case])
    make_optimizer = arguments.pop("optimizer", None)
    expected, expected_history = fit(**arguments, optimizer=make_optimizer and make_optimizer())
    request.getfixturevalue("autograph_converts_no_gaviz_function")
    got, history = fit(**arguments, optimizer=make_optimizer and make_optimizer())
    for a, b in zip(got.model.get_weights(), expected.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert [dataclasses.replace(u, seconds=0) for u in history.updates] == [
        dataclasses.replace(u, seconds=0) for u in expected_history.updates
    ]
    assert len(history.updates) >= 8  # 13 micro-batches an epoch, 3 a window

