"""The exercise solutions of lessons 08, 09 and 11 do what their exercises ask, checked against
independent computations: Keras's Model.fit on the big batch, and each layer's own flag."""

import importlib
import pathlib
import sys

import keras
import numpy as np

import gaviz

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

accumulator = importlib.import_module("solutions.08_accumulator_epoch")
your_model = importlib.import_module("solutions.09_your_model")
freeze = importlib.import_module("solutions.11_freeze")


def _same_weights(a, b, atol=1e-6):
    return all(np.allclose(u, v, atol=atol) for u, v in zip(a.get_weights(), b.get_weights()))


def test_the_accumulator_loop_is_model_fit_on_the_big_batch_with_a_penalty_and_a_tail():
    """Two epochs of 522 samples in micro-batches of 32, k = 4 (4 full windows and one of a
    single micro-batch of 10 rows), with an L2 penalty: Model.fit on batches of 128."""
    x, y = gaviz.demo.make_data(522, seed=3)

    def make():
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(
            16, activation="tanh", kernel_regularizer=keras.regularizers.L2(0.01)),
            keras.layers.Dense(1)])
        return model

    model, optimizer = make(), keras.optimizers.Adam(1e-2)
    for _ in range(2):
        accumulator.accumulator_epoch(model, optimizer, keras.losses.MeanSquaredError(),
                                      gaviz.demo.make_dataset(x, y, 32), 4)
    big = make()
    big.compile(keras.optimizers.Adam(1e-2), "mse")
    big.fit(x, y, batch_size=128, epochs=2, shuffle=False, verbose=0)
    assert int(optimizer.iterations) == 10 and _same_weights(model, big)


def test_your_model_is_model_fit_at_256_with_its_history():
    x, y = gaviz.demo.make_data(700, seed=6)
    validation = gaviz.demo.make_data(100, seed=7)
    keras.utils.set_random_seed(6)
    model = your_model.make_my_model()
    history = your_model.fit_accumulated(model, x, y, validation)
    keras.utils.set_random_seed(6)
    big = your_model.make_my_model()
    expected = big.fit(x, y, batch_size=256, epochs=3, shuffle=False, validation_data=validation,
                       verbose=0)
    assert _same_weights(model, big, atol=1e-5)
    for name, values in expected.history.items():
        assert np.allclose(history.history[name], values, rtol=1e-4), name
    val_loss = expected.history["val_loss"]
    assert your_model.best_epoch(history) == val_loss.index(min(val_loss)) + 1


def test_freezing_reaches_every_batch_normalization_and_nothing_else():
    inner = keras.Sequential([keras.layers.Dense(4), keras.layers.BatchNormalization(name="deep"),
                              keras.Sequential([keras.layers.BatchNormalization(name="deeper")])])
    model = keras.Sequential([keras.Input((3,)), inner, keras.layers.BatchNormalization(name="top"),
                              keras.layers.Dense(1)])
    assert freeze.freeze_batch_normalization(model) is model
    flags = {}

    def walk(layer):
        for child in getattr(layer, "layers", []):
            flags[child.name] = child.trainable
            walk(child)

    walk(model)
    assert [flags[name] for name in ("deep", "deeper", "top")] == [False, False, False]
    assert all(flags[layer.name] for layer in model.layers if isinstance(layer, keras.layers.Dense))
    assert model.trainable and inner.trainable
