"""``jit_compile=True`` on arrays: the whole graph call is one XLA program.

Every micro-step, the window's finish, the update and the window loop are
compiled together, so each test holds that program to the same references
as the default path: the independent big-batch trainer and Keras's own
``Model.fit`` on the big batch.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    assert_same_history,
    assert_same_weights,
    clone,
    make_mlp,
    make_tagger,
    padded_tokens,
    start_of,
)
from reference import group_windows, micro_batches, train_big_batches

import gaviz
from gaviz.training.fit import compiling

B, K = 8, 3  # 100 rows: 12 micro-batches of 8 and a short one of 4
MSE = keras.losses.MeanSquaredError(reduction=None)


def weighted(regression_data):
    x, y = regression_data
    return x, y, np.random.default_rng(1).uniform(size=len(x)).astype("float32")


def micro_of(x, y, w=None):
    return micro_batches(x, y, [B] * (len(x) // B) + [len(x) % B], w)


def test_the_whole_call_is_one_xla_program(regression_data):
    x, y, _ = weighted(regression_data)
    trainer = gaviz.AccumulationTrainer(
        make_mlp(), keras.optimizers.SGD(0.1), "mse", K, jit_compile=True
    )
    trainer.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    arrays = (tf.constant(x), tf.constant(y))
    order = tf.range(len(x), dtype=tf.int64)
    hlo = trainer.window_loop.array_windows.experimental_get_compiler_ir(
        arrays, order, B, len(x), tf.constant(4), tf.constant(K, tf.int64)
    )(stage="hlo")
    # One program holding the window loop, the micro-steps' matrix products
    # and the update: nothing of the call is left outside XLA.
    assert "while" in hlo and "dot(" in hlo
    assert trainer.window_loop.whole_call_compiled


def small_cnn():
    keras.utils.set_random_seed(2)
    return keras.Sequential([
        keras.Input((6, 6, 2)), keras.layers.Conv2D(3, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1),
    ])


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="a CPU's XLA issue")
def test_a_convolution_on_a_cpu_compiles_each_micro_step_says_so_and_stays_exact():
    """XLA's CPU backend runs convolution gradients tens of times slower in a
    loop (jax-ml/jax#12868): the window loop is left to TensorFlow."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(20, 6, 6, 2)).astype("float32")
    y = rng.normal(size=(20, 1)).astype("float32")
    model = small_cnn()
    reference, start = clone(model), start_of(model)
    with pytest.warns(UserWarning, match=r"Conv2D layers tens of times slower inside a loop"):
        trainer = gaviz.AccumulationTrainer(
            model, keras.optimizers.SGD(0.1), "mse", K, jit_compile=True
        )
    assert not trainer.window_loop.whole_call_compiled
    trainer.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    windows = group_windows(micro_batches(x, y, [4] * 5), K, "flush", 1)
    train_big_batches(reference, keras.optimizers.SGD(0.1), MSE, windows)
    assert_same_weights(model, reference, start, terms=K * 4)


@pytest.mark.parametrize("tail", ["flush", "drop", "carry"])
def test_tails_and_weights_match_the_big_batch_reference(regression_data, tail):
    x, y, w = weighted(regression_data)
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    trainer = gaviz.AccumulationTrainer(
        model, keras.optimizers.Adam(0.01), "mse", K, tail=tail, jit_compile=True
    )
    history = trainer.fit(x, y, batch_size=B, epochs=2, shuffle=False, sample_weight=w, verbose=0)
    windows = group_windows(micro_of(x, y, w), K, tail, 2)
    train_big_batches(reference, keras.optimizers.Adam(0.01), MSE, windows)
    assert_same_weights(model, reference, start, terms=K * B)
    assert len(history) == len(windows)
    assert int(trainer.micro_step.numpy()) == 26


def test_a_mask_and_a_metric_match_keras_fit():
    tokens, labels = padded_tokens(100)
    model = make_tagger(mask_zero=True)
    reference, start = clone(model), start_of(model)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss, metrics=["accuracy"])
    reference.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss, metrics=["accuracy"])
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K, jit_compile=True)
    history = trainer.fit(tokens, labels, batch_size=B, epochs=2, shuffle=False, verbose=0)
    expected = reference.fit(
        tokens, labels, batch_size=K * B, epochs=2, shuffle=False, verbose=0
    )
    assert_same_weights(model, reference, start, terms=K * B * tokens.shape[1])  # rows x tokens
    assert_same_history(history.history, expected.history)


def test_a_schedule_of_k_is_traced_once_and_agrees_with_the_default_path(regression_data):
    x, y, _ = weighted(regression_data)
    schedule = {1: 1, 2: 2, 3: 4}.__getitem__
    models, histories = [], []
    for jit_compile in (False, True):
        keras.utils.set_random_seed(5)  # the same shuffled orders for both
        model = make_mlp()
        start = start_of(model)
        trainer = gaviz.AccumulationTrainer(
            model, keras.optimizers.Adam(0.01), "mse", schedule, jit_compile=jit_compile
        )
        histories.append(trainer.fit(x, y, batch_size=B, epochs=3, verbose=0))
        assert trainer.tracing_count == 1
        models.append(model)
    assert_same_weights(*models, start, terms=4 * B)  # the schedule's largest window
    assert histories[1].accumulation_steps == histories[0].accumulation_steps
    np.testing.assert_allclose(histories[1].loss, histories[0].loss, rtol=1e-5)


def test_a_non_finite_window_is_not_applied(regression_data):
    x, y, _ = weighted(regression_data)
    x = x.copy()
    x[2 * K * B + 1] = np.nan  # in the third window
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    trainer = gaviz.AccumulationTrainer(
        model, keras.optimizers.Adam(0.01), "mse", K, jit_compile=True
    )
    with pytest.raises(gaviz.NonFiniteUpdate) as raised:
        trainer.fit(x, y, batch_size=B, shuffle=False, verbose=0)
    assert raised.value.update == 3
    assert int(trainer.optimizer.iterations.numpy()) == 2
    windows = group_windows(micro_of(x, y), K, "flush", 1)[:2]
    train_big_batches(reference, keras.optimizers.Adam(0.01), MSE, windows)
    assert_same_weights(model, reference, start, terms=K * B)


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="a CPU's XLA issue")
def test_auto_the_default_chooses_xla_where_layers_allow_but_not_for_convolutions_on_a_cpu(
        regression_data, caplog):
    """jit_compile="auto", the default: XLA where every layer supports it
    (Keras's rule) and it is not slower on the device; the choice is an
    attribute and a log line."""
    x, y = regression_data
    sgd = keras.optimizers.SGD
    with caplog.at_level("INFO", logger="gaviz"):
        mlp = gaviz.AccumulationTrainer(make_mlp(), sgd(0.1), "mse", K)  # the default
    assert mlp.jit_compile and mlp.window_loop.whole_call_compiled
    assert mlp.window_loop.compiled_micro_sums == mlp.window_loop.forward_backward.sums  # datasets: none
    assert "jit_compile='auto'" in caplog.text and "compiles each graph call" in caplog.text
    reference = gaviz.AccumulationTrainer(make_mlp(), sgd(0.1), "mse", K, jit_compile=False)
    assert not reference.jit_compile
    start = start_of(reference.model)
    for trainer in (mlp, reference):
        trainer.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert_same_weights(mlp.model, reference.model, start, terms=K * B)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(B)
    for trainer in (mlp, reference):
        trainer.fit(dataset, epochs=1, verbose=0)
    assert_same_weights(mlp.model, reference.model, start, terms=K * B)
    cnn = gaviz.AccumulationTrainer(small_cnn(), sgd(0.1), "mse", K)
    assert not cnn.jit_compile and cnn.window_loop.xla == "off"  # no warning either
    no_xla = make_mlp()
    no_xla.layers[0].supports_jit = False  # as a layer without XLA kernels says
    assert not gaviz.AccumulationTrainer(no_xla, sgd(0.1), "mse", K, jit_compile="auto").jit_compile
    with pytest.raises(ValueError, match=r"`jit_compile` must be one of \('auto', True, False\)"):
        gaviz.AccumulationTrainer(make_mlp(), sgd(0.1), "mse", K, jit_compile="xla")


COMPILE_COUNT_SCRIPT = """
import numpy as np, keras, gaviz
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(40, 5)).astype("float32")
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8), keras.layers.Dense(1)])
trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.01), "mse", 2,
                                    jit_compile=True, windows_per_call=1)
trainer.fit(x, x[:, :1], batch_size=4, epochs=2, verbose=0)
"""


def test_each_call_on_arrays_reuses_one_xla_program(tmp_path):
    """Ten graph calls (two epochs of five windows, one per call), each
    starting at another row: XLA compiles the call once. XLA dumps each
    program it compiles (``--xla_dump_to``), which is what is counted.
    (A start read from the cursor into a tf.slice was compiled per call.)"""
    dump = tmp_path / "xla"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, "-c", COMPILE_COUNT_SCRIPT], env=env, check=True,
                   capture_output=True, timeout=300)
    compiled = [p.name for p in dump.glob("*array_windows*before_optimizations.txt")]
    assert len(compiled) == 1, compiled


def wide(built: bool):
    """A dense model whose weights take just over 16 MiB (2048 x 2048 float32, and a bias)."""
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(2048), keras.layers.Dense(1)]
    return keras.Sequential([keras.Input((2048,)), *layers] if built else layers)


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="a CPU's choice")
def test_auto_leaves_a_model_with_large_weights_to_plain_graphs_decided_once_it_is_built():
    """XLA's peak holds more copies of the weights: "auto" spends that on
    small models only. A model built at the first fit is decided then."""
    sgd = keras.optimizers.SGD
    assert compiling.weight_bytes(wide(True)) > compiling.AUTO_XLA_MAX_WEIGHT_BYTES
    assert not gaviz.AccumulationTrainer(wide(True), sgd(0.01), "mse", 2).jit_compile
    assert gaviz.AccumulationTrainer(wide(True), sgd(0.01), "mse", 2, jit_compile=True).jit_compile
    x = np.random.default_rng(0).normal(size=(8, 2048)).astype("float32")
    for model, compiled in ((wide(False), False), (make_mlp_without_input(), True)):
        trainer = gaviz.AccumulationTrainer(model, sgd(0.01), "mse", 2)
        trainer.fit(x[:, : 2048 if not compiled else 5], x[:, :1], batch_size=4, verbose=0)
        assert trainer.jit_compile is compiled
        assert trainer.window_loop.whole_call_compiled is compiled


def make_mlp_without_input():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="a CPU's choice")
def test_auto_runs_plain_graphs_until_the_run_is_long_enough_to_repay_xla(regression_data):
    """A short run does not pay XLA's compile: "auto" runs plain graphs for
    the trainer's first AUTO_XLA_AFTER_MICRO_STEPS micro-steps (lowered here
    to two epochs' 26), then one XLA program per call from the next pass on;
    jit_compile=True compiles at once. The weights are the plain graphs' all along."""
    x, y = regression_data
    sgd = keras.optimizers.SGD
    auto = gaviz.AccumulationTrainer(make_mlp(), sgd(0.1), "mse", K)
    assert auto.window_loop.xla_after_micro_steps == compiling.AUTO_XLA_AFTER_MICRO_STEPS
    assert gaviz.AccumulationTrainer(make_mlp(), sgd(0.1), "mse", K,
                                     jit_compile=True).window_loop.xla_after_micro_steps == 0
    reference = gaviz.AccumulationTrainer(make_mlp(), sgd(0.1), "mse", K, jit_compile=False)
    start = start_of(reference.model)
    for epochs, xla_traces in ((2, 0), (3, 1)):
        for trainer in (auto, reference):
            trainer.fit(x, y, batch_size=B, epochs=epochs, shuffle=False, verbose=0)
        loop = auto.window_loop  # built for the first micro-batch's size at the first fit
        assert loop.array_windows.experimental_get_tracing_count() == xla_traces
        assert loop.plain_array_windows.experimental_get_tracing_count() == 1
        assert_same_weights(auto.model, reference.model, start, terms=K * B)
        # Lowered from 8192 to the 26 micro-steps of the first fit (13 an epoch).
        loop.xla_after_micro_steps = 26
