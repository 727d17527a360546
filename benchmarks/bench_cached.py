"""7. The cached window: a loss that couples rows, its time and its memory.

The cached window (gaviz.training.cached) makes a window's gradient of a loss
computed once on the whole window's outputs: each micro-batch forward without
a tape, the loss, then each micro-batch forward and backward again. It costs
one more forward pass per micro-batch, and holds the window's micro-batches
and outputs, not their activations.

Time: an embedder (Dense 256-256-32, unit-length outputs) on 2,048 rows of 64
features, micro-batch 32, k = 8, Adam, plain graphs (jit_compile=False): the
summing window with a per-row loss (mean squared error to 32-wide targets),
the cached window with the same loss (cached_window=True: its cost alone),
the cached window with in-batch negatives (the loss it is for), and Model.fit
at the big batch with in-batch negatives; in turns (benchmarks/harness.py).

Memory: a convolutional embedder (conv 32-32-64 at 32x32, global pooling,
Dense 64, unit-length) on 512 images, micro-batch 32, k = 8, SGD, each
configuration in fresh processes (as bench_memory.py): the plain step at
batch 32, the summing window, the cached window (the same per-row loss, and
in-batch negatives), and Model.fit at batch 256 with in-batch negatives.

    python benchmarks/bench_cached.py [--rounds 7] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import warnings

os.environ.update({"TF_ENABLE_ONEDNN_OPTS": "1"})  # the CPU allocator's statistics (bench_memory.py)

import harness  # noqa: E402  first: it quiets TensorFlow before TensorFlow is imported
import keras
import numpy as np
import tensorflow as tf
from keras import ops

import gaviz

MICRO, K, FEATURES, WIDTH = 32, 8, 64, 32
SIZE = 32  # the memory benchmark's images


def in_batch_negatives(y_true, y_pred):
    """Each row's cross-entropy against every row of its batch as candidates (rows of
    one label are positives)."""
    similarity = ops.matmul(y_pred, ops.transpose(y_pred)) * 5.0
    same = ops.cast(ops.equal(y_true[:, None], y_true[None, :]), similarity.dtype)
    return ops.logsumexp(similarity, axis=1) - ops.sum(similarity * same, axis=1) / ops.sum(
        same, axis=1)


def dense_embedder(loss):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"), keras.layers.Dense(WIDTH),
        keras.layers.UnitNormalization()])
    model.compile(keras.optimizers.Adam(1e-3), loss)
    return model


def conv_embedder(loss):
    keras.utils.set_random_seed(0)
    conv = dict(kernel_size=3, padding="same", activation="relu")
    model = keras.Sequential([
        keras.Input((SIZE, SIZE, 3)), keras.layers.Conv2D(32, **conv),
        keras.layers.Conv2D(32, **conv), keras.layers.Conv2D(64, **conv),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(64),
        keras.layers.UnitNormalization()])
    model.compile(keras.optimizers.SGD(0.01), loss)
    return model


def rows(count, shape, width, seed=0):
    """Inputs, labels (8 classes) and per-row targets of ``width``."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(count, *shape)).astype("float32"),
            rng.integers(0, 8, count).astype("int32"),
            rng.normal(size=(count, width)).astype("float32"))


# name -> (the loss: "per-row" or "in-batch", how it trains: "summing", "cached", "keras")
CONFIGURATIONS = {
    "gaviz, summing window, per-row loss": ("per-row", "summing"),
    "gaviz, cached window, the same per-row loss": ("per-row", "cached"),
    "gaviz, cached window, in-batch negatives": ("in-batch", "cached"),
    f"Model.fit, batch {MICRO * K}, in-batch negatives": ("in-batch", "keras"),
}
PLAIN_STEP = f"plain step, batch {MICRO}, per-row loss"


def epoch(make, name, x, labels, targets):
    """One epoch of configuration ``name`` of the model ``make(loss)`` makes."""
    loss_kind, how = CONFIGURATIONS[name]
    model = make(in_batch_negatives if loss_kind == "in-batch" else "mse")
    y = labels if loss_kind == "in-batch" else targets
    if how == "keras":
        return lambda: model.fit(x, y, batch_size=MICRO * K, shuffle=False, verbose=0), model
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K, jit_compile=False,
                                        cached_window=how == "cached" or "auto")
    return lambda: trainer.fit(x, y, batch_size=MICRO, shuffle=False, verbose=0), model


def plain_step_epoch(model, x, y):
    optimizer, loss = model.optimizer, keras.losses.MeanSquaredError()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            value = loss(yb, model(xb, training=True))
        optimizer.apply_gradients(zip(tape.gradient(value, model.trainable_variables),
                                      model.trainable_variables))

    def run():
        for start in range(0, len(x), MICRO):
            step(x[start:start + MICRO], y[start:start + MICRO])

    return run


def measure(name, samples):
    """In a fresh process: one configuration's peak growth during an epoch."""
    x, labels, targets = rows(samples, (SIZE, SIZE, 3), 64)
    if name == PLAIN_STEP:
        model = conv_embedder("mse")
        run = plain_step_epoch(model, x, targets)
    else:
        run, model = epoch(conv_embedder, name, x, labels, targets)
    run()  # warm-up: tracing, optimizer slots, first-call allocations
    gc.collect()
    _, report = gaviz.measure_peak_memory(run, device="CPU:0")
    return {"growth_bytes": report.growth_bytes}


def in_child(name, quick):
    command = [sys.executable, __file__, "--child", name] + (["--quick"] if quick else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"Measuring {name!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--processes", type=int, default=3)
    harness.add_common_arguments(parser, "benchmarks/results/cached.json")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", gaviz.CachedWindowUsed)
    memory_samples = 256 if args.quick else 512
    if args.child:
        print(json.dumps(measure(args.child, memory_samples)))
        return

    samples, rounds = (512, 1) if args.quick else (2048, args.rounds)
    x, labels, targets = rows(samples, (FEATURES,), WIDTH)
    contestants = {name: epoch(dense_embedder, name, x, labels, targets)[0]
                   for name in CONFIGURATIONS}
    ms = {name: harness.median_ms(t) for name, t in harness.alternate(contestants, rounds).items()}

    processes = 1 if args.quick else args.processes
    names = [PLAIN_STEP, *CONFIGURATIONS]
    runs = {}
    for _ in range(processes):
        for name in names:
            runs.setdefault(name, []).append(in_child(name, args.quick))
    mib = {name: statistics.median(r["growth_bytes"] for r in measured) / 2**20
           for name, measured in runs.items()}
    window_rows = MICRO * K
    kept_mib = window_rows * (SIZE * SIZE * 3 + 1 + 64) * 4 / 2**20  # inputs, labels, outputs
    summing, cached = mib["gaviz, summing window, per-row loss"], \
        mib["gaviz, cached window, the same per-row loss"]
    plain = ms["gaviz, summing window, per-row loss"]
    table = [[f"median epoch (ms), {name}", value, value / plain] for name, value in ms.items()]
    table += [[f"peak growth (MiB), {name}", value, value / mib[PLAIN_STEP]]
              for name, value in mib.items()]
    result = harness.write_result(
        args.json,
        name="cached",
        title="7. The cached window: a loss that couples rows",
        setup=(
            f"Time: Dense 256-256-{WIDTH} embedder, {samples} rows of {FEATURES} features, "
            f"micro-batch {MICRO} x k = {K}, Adam, jit_compile=False; median of {rounds} "
            "alternating epochs after one warm-up. Memory: conv 32-32-64 embedder on "
            f"{memory_samples} images of {SIZE}x{SIZE}x3, SGD; peak of TensorFlow's allocator "
            "during an epoch after a warm-up one, above what was in use before it, median of "
            f"{processes} fresh process(es) per configuration."
        ),
        columns=["what", "ms or MiB", "/ the first row of its kind"],
        rows=table,
        targets=[
            harness.target("the cached window's epoch / the summing window's, the same per-row "
                           "loss", ms["gaviz, cached window, the same per-row loss"] / plain,
                           1.5, "x", at_least=False),
            harness.target("cached window's extra peak / its kept micro-batches and outputs",
                           (cached - summing) / kept_mib,
                           1.0, "x", at_least=False),
            harness.target("the cached window's peak / Model.fit's at the big batch, in-batch "
                           "negatives", mib["gaviz, cached window, in-batch negatives"]
                           / mib[f"Model.fit, batch {MICRO * K}, in-batch negatives"], 1.0, "x",
                           at_least=False),
        ],
        notes=[
            f"The window's micro-batches and outputs: {kept_mib:.1f} MiB ({window_rows} images, "
            "labels, 64-wide outputs), kept until the window ends; its activations are one "
            "micro-batch's at a time, as the summing window's.",
            "All memory runs (MiB): " + "; ".join(
                f"{name}: " + ", ".join(f"{r['growth_bytes'] / 2**20:.1f}" for r in measured)
                for name, measured in runs.items()) + ".",
        ],
        plot={"labels": list(ms), "ms": list(ms.values()), "mib_labels": list(mib),
              "mib": list(mib.values())},
    )
    for row in result["rows"]:
        print(f"{row[0]:<78} {row[1]:9.1f} {row[2]:6.2f}x")


if __name__ == "__main__":
    main()
