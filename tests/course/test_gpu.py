"""gaviz.course.gpu on this CPU-only machine: the capstone's device, and the devices
guide's memory sizing with CPU allocator statistics standing in for a GPU's."""

import os
import subprocess
import sys

import pytest

from gaviz.course import gpu
from gaviz.gallery.memory import CPU_ALLOCATOR_STATS_ENV


def test_without_a_gpu_the_device_is_the_cpu_and_its_memory_unknown():
    assert gpu.accelerator() == "CPU:0"
    assert gpu.device_memory_bytes("CPU:0") is None


BYTES_PER_SAMPLE = """
import keras
import tensorflow as tf
from gaviz.course import gpu

def step_of(width):
    def step(batch_size):
        model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(width),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")
        model.train_on_batch(tf.random.normal((batch_size, width)), tf.zeros((batch_size, 1)))
    return step

print(*(gpu.bytes_per_sample(step_of(w), "CPU:0") for w in (64, 512)))
"""


def test_bytes_per_sample_grows_with_the_width():
    """In a process that asks for the CPU allocator's statistics (set before TensorFlow starts)."""
    env = {**os.environ, **CPU_ALLOCATOR_STATS_ENV}
    done = subprocess.run([sys.executable, "-c", BYTES_PER_SAMPLE], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    narrow, wide = map(float, done.stdout.split()[-2:])
    # Each sample holds its input and activations (4 bytes a number): at least width x 4 bytes.
    assert narrow >= 64 * 4 and wide >= 512 * 4
    assert wide > 4 * narrow


@pytest.mark.parametrize("memory, per_sample, k", [(2**30, 2**20, 8), (64 * 2**20, 16_000, 16)])
def test_the_plan_needs_twice_the_memory_in_micro_batches_that_fit(memory, per_sample, k):
    plan = gpu.plan_for(memory, per_sample, k)
    assert plan.big_batch == plan.micro_batch_size * k
    assert 1.9 * memory <= plan.need_bytes <= 2 * memory
    assert plan.micro_batch_size * per_sample <= 2 * memory / k  # fits where the big one does not


def test_a_plan_prints_for_people():
    plan = gpu.Plan(big_batch=8192, micro_batch_size=512, accumulation_steps=16,
                    need_bytes=134184960.0)
    assert str(plan) == ("a big batch of 8,192 needs about 128 MiB; "
                         "the same update: 16 micro-batches of 512")
