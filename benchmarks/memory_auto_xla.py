"""Why jit_compile="auto" leaves a model with large weights to plain graphs.

    python benchmarks/memory_auto_xla.py

Not part of ``make bench``: it backs one figure of docs/guide/devices.md and
``compiling.AUTO_XLA_MAX_WEIGHT_BYTES``. On a dense model with 9 MiB of
weights (256-1024-1024-1024-10, micro-batch 32, k = 8, 1024 samples) it
measures how much TensorFlow's CPU allocator peak grows during an epoch,
each configuration in a fresh process, median of three: a plain step at
batch 32 (with and without XLA) and at 256, and gaviz on the arrays without
XLA and with the whole call compiled.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

# Before TensorFlow starts: oneDNN's CPU allocator keeps the statistics read here.
os.environ.update({"TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})

MICRO, K, SAMPLES = 32, 8, 1024
CONFIGURATIONS = ("plain step, batch 32", "plain step under XLA, batch 32",
                  "plain step, batch 256", "gaviz, jit_compile=False", "gaviz, whole call in XLA")


def make_model():
    import keras

    keras.utils.set_random_seed(0)
    hidden = [keras.layers.Dense(1024, activation="relu") for _ in range(3)]
    return keras.Sequential([keras.Input((256,)), *hidden, keras.layers.Dense(10)])


def gaviz_epoch(model, x, y, loss, jit_compile):
    import keras

    import gaviz

    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.01), loss, K,
                                        jit_compile=jit_compile)
    assert trainer.window_loop.whole_call_compiled == jit_compile
    return lambda: trainer.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)


def measure(name) -> dict:
    """In this process: the allocator peak's growth during one epoch of ``name``."""
    import gc

    import keras
    import numpy as np
    import tensorflow as tf

    import gaviz

    model = make_model()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 256)).astype("float32")
    y = rng.integers(0, 10, size=(SAMPLES,)).astype("int32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # bench_memory's textbook step (its loss is this one); imported here, in
    # the child, as it loads TensorFlow.
    from bench_memory import plain_epoch

    def batches(size):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(size)

    epoch = {
        CONFIGURATIONS[0]: lambda: plain_epoch(model, batches(MICRO), False),
        CONFIGURATIONS[1]: lambda: plain_epoch(model, batches(MICRO), True),
        CONFIGURATIONS[2]: lambda: plain_epoch(model, batches(MICRO * K), False),
        CONFIGURATIONS[3]: lambda: gaviz_epoch(model, x, y, loss, False),
        CONFIGURATIONS[4]: lambda: gaviz_epoch(model, x, y, loss, True),
    }[name]()
    epoch()  # warm-up: tracing, compiling, optimizer slots
    gc.collect()
    _, report = gaviz.measure_peak_memory(epoch, device="CPU:0")
    weights = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
    return {"growth": report.growth_bytes, "weights": weights}


def main():
    if len(sys.argv) > 1:
        print(json.dumps(measure(sys.argv[1])))
        return
    measured = {name: [] for name in CONFIGURATIONS}
    for _ in range(3):
        for name in CONFIGURATIONS:
            done = subprocess.run([sys.executable, __file__, name], capture_output=True,
                                  text=True, check=True)
            measured[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    weights = measured[CONFIGURATIONS[0]][0]["weights"]
    print(f"weights: {weights / 2**20:.2f} MiB")
    for name, runs in measured.items():
        growth = statistics.median(run["growth"] for run in runs)
        print(f"{name:32} {growth / 2**20:7.2f} MiB {growth / weights:5.2f}x the weights")


if __name__ == "__main__":
    main()
