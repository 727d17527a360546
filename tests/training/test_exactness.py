"""The trainer's weights and losses equal big-batch training on the same samples."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import PIPELINES, assert_same_weights, make_mlp, start_of
from reference import (
    dataset_of,
    group_windows,
    max_weight_difference,
    micro_batches,
    train_big_batches,
)

import gaviz

OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(0.01),
}


def run_both(micro, k, tail="flush", epochs=2, optimizer="sgd", loss="mse", **model_kwargs):
    """Trains with gaviz and with the reference; returns (history, model, ref_losses,
    ref_model, start), ``start`` the weights both began from."""
    model = make_mlp(**model_kwargs)
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(
        model, OPTIMIZERS[optimizer](), loss, accumulation_steps=k, tail=tail
    )
    history = trainer.fit(dataset_of(micro), epochs=epochs)

    reference = make_mlp(**model_kwargs)
    ref_losses = train_big_batches(
        reference,
        OPTIMIZERS[optimizer](),
        keras.losses.get(loss),
        group_windows(micro, k, tail, epochs),
    )
    return history, model, ref_losses, reference, start


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_ragged_tail_matches_big_batches(regression_data, optimizer):
    x, y = regression_data
    # 100 samples in micro-batches of 8: 12 full and one of 4; k=3 leaves a
    # partial window of one short micro-batch (4 samples) each epoch.
    micro = micro_batches(x, y, [8] * 12 + [4])
    history, model, ref_losses, reference, start = run_both(micro, 3, optimizer=optimizer)
    assert history.samples[:5] == [24, 24, 24, 24, 4]
    assert len(history) == len(ref_losses) == 10
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=24)
    # The run changed the weights: the comparison is not between two no-ops.
    assert max_weight_difference(model, make_mlp()) > 1e-2


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_ragged_micro_batches_inside_windows(regression_data, optimizer):
    x, y = regression_data
    micro = micro_batches(x, y, [3, 17, 5, 9, 1, 20, 13, 2, 30])
    history, model, ref_losses, reference, start = run_both(micro, 4, optimizer=optimizer)
    assert history.samples == [34, 36, 30] * 2
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=36)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_matches_keras_fit_on_big_batches(regression_data, pipeline):
    x, y = regression_data
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", 4)
    dataset = PIPELINES[pipeline](tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
    history = trainer.fit(dataset, epochs=3)

    reference = make_mlp()
    reference.compile(keras.optimizers.Adam(0.01), "mse")
    reference.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)
    assert history.samples[:4] == [32, 32, 32, 4]
    assert_same_weights(model, reference, start, terms=32)


def test_sample_weights(regression_data):
    x, y = regression_data
    w = np.random.default_rng(3).uniform(0.0, 2.0, size=(100,)).astype("float32")
    micro = micro_batches(x, y, [8] * 12 + [4], w)
    history, model, ref_losses, reference, start = run_both(micro, 4, optimizer="adam")
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=32)

    keras_model = make_mlp()
    keras_model.compile(keras.optimizers.Adam(0.01), "mse")
    keras_model.fit(x, y, sample_weight=w, batch_size=32, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(model, keras_model, start, terms=32)


def test_weight_regularization_counts_once_per_update(regression_data):
    x, y = regression_data
    micro = micro_batches(x, y, [8] * 12 + [4])
    l2 = {"kernel_regularizer": keras.regularizers.L2(0.05)}
    history, model, ref_losses, reference, start = run_both(micro, 4, optimizer="sgd", **l2)
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=32)

    keras_model = make_mlp(**l2)
    keras_model.compile(keras.optimizers.SGD(0.1), "mse")
    keras_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(model, keras_model, start, terms=32)


def test_activity_regularization_is_normalized_by_the_window(regression_data):
    x, y = regression_data
    micro = micro_batches(x, y, [8] * 12 + [4])
    history, model, ref_losses, reference, start = run_both(
        micro, 4, activity_regularizer=keras.regularizers.L2(0.1)
    )
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=32)


def test_one_step_is_plain_training(regression_data):
    x, y = regression_data
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.1, momentum=0.9), "mse", 1)
    trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=2)
    reference = make_mlp()
    reference.compile(keras.optimizers.SGD(0.1, momentum=0.9), "mse")
    reference.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert trainer.optimizer.iterations.numpy() == 2 * 7
    assert_same_weights(model, reference, start, terms=16)


@pytest.mark.parametrize("tail", ["flush", "drop", "carry"])
def test_tail_policies(regression_data, tail):
    x, y = regression_data
    micro = micro_batches(x, y, [8] * 12 + [4])  # 13 micro-batches, k=5: tail of 3
    history, model, ref_losses, reference, start = run_both(micro, 5, tail=tail, epochs=3)
    expected_updates = {"flush": 9, "drop": 6, "carry": 7}[tail]
    assert len(history) == len(ref_losses) == expected_updates
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=40)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_token_level_losses_match_keras(regression_data, pipeline):
    """Per-token losses (batch, time): the divisor counts tokens, as Keras does."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, 6, 3)).astype("float32")
    y = rng.integers(0, 4, size=(40, 6))

    def model_fn():
        keras.utils.set_random_seed(2)
        return keras.Sequential([keras.Input((6, 3)), keras.layers.Dense(4)])

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = model_fn()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.05), loss, 3)
    dataset = PIPELINES[pipeline](tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
    history = trainer.fit(dataset, epochs=2)
    assert history.samples[:4] == [72, 72, 72, 24]

    reference = model_fn()
    reference.compile(keras.optimizers.Adam(0.05), loss)
    reference.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(model, reference, start, terms=12 * 6)  # rows x tokens


def test_jit_compile_gives_the_same_weights(regression_data):
    """On arrays, jit_compile=True makes the whole call one XLA program, and the
    weights are those of the uncompiled call. (On a dataset only each
    micro-step is compiled, and an ignored jit_compile would go unseen.)"""
    x, y = regression_data
    arrays = (tf.constant(x), tf.constant(y))
    order = tf.range(len(x), dtype=tf.int64)
    call = (arrays, order, 8, len(x), tf.constant(4), tf.constant(4, tf.int64))
    models = []
    for jit in (False, True):
        model = make_mlp()
        start = start_of(model)
        trainer = gaviz.AccumulationTrainer(
            model, keras.optimizers.Adam(0.01), "mse", 4, jit_compile=jit
        )
        trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        assert trainer.window_loop.whole_call_compiled is jit
        function = trainer.window_loop.array_windows
        if jit:  # XLA's program for the call: its window loop and matrix products
            hlo = function.experimental_get_compiler_ir(*call)(stage="hlo")
            assert "while" in hlo and "dot(" in hlo
        else:
            with pytest.raises(ValueError, match="jit_compile=True"):
                function.experimental_get_compiler_ir(*call)
        models.append(model)
    assert_same_weights(*models, start, terms=32)
