"""Recompiling and unfreezing between fits: the next trainer.fit trains what
Model.fit would (the transfer-learning recipe), or refuses by name."""

import keras
import numpy as np
import pytest
from helpers import assert_same_weights, start_of

import gaviz

K, B = 4, 8
rng = np.random.default_rng(0)
X = rng.normal(size=(100, 5)).astype("float32")  # 100 rows: a partial last window
Y = (np.sin(X[:, :1]) + X[:, 1:2]).astype("float32")


def make():
    """A frozen-able base and a head, with seeded weights."""
    keras.utils.set_random_seed(1)
    base = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh")],
                            name="base")
    return base, keras.Sequential([base, keras.layers.Dense(1)])


def recipe(fit):
    """Freeze the base, fit; unfreeze, recompile with a small rate and a metric, fit again."""
    base, model = make()
    base.trainable = False
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    first = fit(model, fresh=True)
    frozen_base = [w.copy() for w in base.get_weights()]
    base.trainable = True
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mae", metrics=["mse"])
    second = fit(model, fresh=False)
    return model, base, frozen_base, first, second


def test_the_transfer_learning_recipe_equals_model_fit():
    trainers = []

    def with_gaviz(model, fresh):
        if fresh:
            trainers.append(gaviz.AccumulationTrainer(model, accumulation_steps=K))
        return trainers[0].fit(X, Y, batch_size=B, epochs=2, shuffle=False, verbose=0)

    def with_keras(model, fresh):
        return model.fit(X, Y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)

    ours, our_base, our_frozen, our_first, our_second = recipe(with_gaviz)
    theirs, _, their_frozen, their_first, their_second = recipe(with_keras)
    start = start_of(make()[1])  # seeded: where both recipes began
    assert_same_weights(ours, theirs, start, terms=K * B)
    # The base stood still while frozen, and moved once unfrozen.
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(our_frozen, make()[0].get_weights())) == 0
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(our_base.get_weights(), our_frozen)) > 1e-4
    trainer = trainers[0]
    assert trainer.optimizer is ours.optimizer
    assert float(trainer.optimizer.learning_rate) == pytest.approx(1e-3)
    for got, expected in ((our_first, their_first), (our_second, their_second)):
        assert set(got.history) == set(expected.history)
        for name in expected.history:
            np.testing.assert_allclose(got.history[name], expected.history[name], rtol=1e-5)


def test_unfreezing_without_recompiling_is_refused_by_name():
    base, model = make()
    base.trainable = False
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    trainer.fit(X, Y, batch_size=B, verbose=0)
    base.trainable = True
    with pytest.raises(ValueError, match="trainable variables changed.*model.compile"):
        trainer.fit(X, Y, batch_size=B, verbose=0)


def test_recompiling_with_a_carried_window_open_is_refused():
    base, model = make()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K, tail="carry")
    trainer.fit(X, Y, batch_size=B, verbose=0)  # 13 micro-batches: one carried
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    with pytest.raises(ValueError, match="compiled again while a window carried"):
        trainer.fit(X, Y, batch_size=B, verbose=0)
