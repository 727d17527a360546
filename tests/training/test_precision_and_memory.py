"""Mixed precision, loss scaling, and the peak-memory helper."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import make_mlp
from reference import dataset_of, group_windows, micro_batches, train_big_batches

import gaviz
from gaviz.gallery.memory import CPU_ALLOCATOR_STATS_ENV


@pytest.fixture
def policy():
    """Sets a global mixed-precision policy for one test, then restores float32."""
    def set_policy(name):
        keras.mixed_precision.set_global_policy(name)

    yield set_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def micro(regression_data):
    x, y = regression_data
    return micro_batches(x, y, [8] * 12 + [4])


def float32_reference(micro, tail, epochs=2):
    model = make_mlp()
    losses = train_big_batches(
        model, keras.optimizers.SGD(0.1), keras.losses.mean_squared_error,
        group_windows(micro, 4, tail, epochs),
    )
    return model, losses


@pytest.mark.parametrize("name", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_accumulates_in_float32(policy, micro, name):
    policy(name)
    model = make_mlp()
    assert model.layers[0].compute_dtype != "float32"
    optimizer = keras.optimizers.SGD(0.1)
    if name == "mixed_float16":
        # A scale that does not overflow here, so no window is skipped.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0**8)
    trainer = gaviz.AccumulationTrainer(model, optimizer, "mse", 4, tail="carry")
    assert {a.dtype for a in trainer.carried_sums} == {tf.float32}
    history = trainer.fit(dataset_of(micro), epochs=2)
    policy("float32")
    reference, ref_losses = float32_reference(micro, "carry")
    assert int(trainer.skipped_windows.numpy()) == 0
    assert len(history) == len(ref_losses) == 6
    # Half-precision forward passes: close to float32 training, not equal.
    np.testing.assert_allclose(history.loss, ref_losses, rtol=0.05)
    for w, r in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(w, r, atol=0.03)


def test_overflowing_windows_are_skipped_and_the_scale_lowered(policy, micro):
    policy("mixed_float16")
    model = make_mlp()
    optimizer = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=2.0**30
    )
    trainer = gaviz.AccumulationTrainer(model, optimizer, "mse", 4)
    history = trainer.fit(dataset_of(micro), epochs=6)
    skipped = int(trainer.skipped_windows.numpy())
    windows = 6 * 4
    assert 0 < skipped < windows
    assert float(optimizer.dynamic_scale.numpy()) == 2.0**30 / 2**skipped
    assert len(history) == int(optimizer.iterations.numpy()) == windows - skipped
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    assert history.loss[-1] < history.loss[0]


def test_peak_memory_sees_an_allocation():
    def allocate(megabytes):
        block = np.ones(megabytes * 2**20 // 8)
        return float(block.sum())

    total, report = gaviz.measure_peak_memory(allocate, 200)
    assert total == 200 * 2**20 // 8
    assert report.device == "CPU"
    assert 150 * 2**20 < report.growth_bytes < 600 * 2**20
    assert "MiB" in str(report)


CPU_ALLOCATOR_PROBE = """
import tensorflow as tf
import gaviz

@tf.function
def allocate(n):
    block = tf.ones((n,), tf.float32)  # n * 4 bytes, alive until the sum is taken
    return tf.reduce_sum(block)

megabytes = 64
n = tf.constant(megabytes * 2**20 // 4)
for _ in range(2):  # a second measurement in the same process sees it again
    total, report = gaviz.measure_peak_memory(allocate, n, device="CPU:0")
    assert float(total) == megabytes * 2**20 // 4
    assert report.device == "CPU:0"
    assert megabytes * 2**20 <= report.growth_bytes < 1.1 * megabytes * 2**20, report
print("ok")
"""


def test_peak_memory_reads_the_cpu_allocator_when_asked():
    """In a process started with the setting gaviz names (statistics are an
    allocator's choice, made before TensorFlow starts)."""
    env = {**os.environ, **CPU_ALLOCATOR_STATS_ENV}
    done = subprocess.run([sys.executable, "-c", CPU_ALLOCATOR_PROBE], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_a_device_without_allocator_statistics_is_named_with_the_fix():
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
    except ValueError:
        with pytest.raises(ValueError, match="TF_ENABLE_ONEDNN_OPTS=1"):
            gaviz.measure_peak_memory(lambda: None, device="CPU:0")
    else:
        pytest.skip("this process's CPU allocator keeps statistics")

def keras_fit_mixed(x, y, batch_size, epochs):
    """Model.fit under the current policy: compile wraps SGD in a LossScaleOptimizer."""
    model = make_mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("micro_batch_size", [4, 16, 256])
def test_mixed_float16_skips_no_more_windows_than_keras(policy, micro_batch_size):
    """With compile's own LossScaleOptimizer (scale 2**15), as Model.fit at the same
    effective batch: no more windows skipped, and weights within the gap float16
    itself opens (Keras mixed against Keras float32)."""
    k, epochs = 4, 2
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 5)).astype("float32")
    y = np.sin(x[:, :1]).astype("float32")
    reference = keras_fit_mixed(x, y, k * micro_batch_size, epochs)  # float32 policy
    policy("mixed_float16")
    keras_mixed = keras_fit_mixed(x, y, k * micro_batch_size, epochs)
    keras_skipped = epochs * len(x) // (k * micro_batch_size) - int(keras_mixed.optimizer.iterations.numpy())
    model = make_mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=k)
    assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    trainer.fit(x, y, batch_size=micro_batch_size, epochs=epochs, shuffle=False, verbose=0)
    assert int(trainer.skipped_windows.numpy()) <= keras_skipped
    float16_gap = max(float(np.max(np.abs(a - b)))
                      for a, b in zip(keras_mixed.get_weights(), reference.get_weights()))
    gap = max(float(np.max(np.abs(a - b)))
              for a, b in zip(model.get_weights(), reference.get_weights()))
    assert gap <= 2 * float16_gap + 1e-4, (gap, float16_gap)
