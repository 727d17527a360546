"""3. Memory: peak during an epoch, accumulation against plain small and big batches.

A small CNN whose activations, not its weights, fill memory: three 3x3
convolutions (32, 32, 64 channels) at the full 32x32 resolution, global
average pooling, then Dense 2048-2048-10 for 4.35M parameters (16.6 MiB),
so that the accumulators' cost is a figure the measurement can resolve.
Synthetic images, 10 classes, sparse cross-entropy from logits, SGD.

Four configurations, each in a fresh process (the script runs itself with
``--child``), so none inherits another's caches: gaviz at micro-batch 32 x
k = 8; a textbook ``tf.function`` train step at batch 32 and at batch 256;
gaviz with k = 1 on batches of 256. Accumulation should cost about one copy
of the parameters (the window's sums) over plain batch 32; batch 256's
activations grow with the batch. (An Embedding's window holds the rows it
looked up, not a sum: benchmarks/bench_sparse.py.)

Each child runs one untimed warm-up epoch (tracing, optimizer slots, caches),
resets TensorFlow's allocator statistics, then runs the measured epoch; we
report its peak minus what was in use when it started. Those statistics
(``tf.config.experimental.get_memory_info``, which works on CPU:0 too) count
every buffer TensorFlow's allocator hands out: tensors, temporaries and
dataset batches; not Python or numpy objects, nor memory a library such as
oneDNN keeps for itself. Unlike resident memory, which keeps freed pages and
must be sampled, they are exact. They are not fixed, though: the executor
runs independent operations in an order that varies from run to run, and
whether one more activation-sized tensor (4 MiB at batch 32, 32 MiB at
batch 256) is still alive at the peak moves the figure by that much.

    python benchmarks/bench_memory.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import subprocess
import sys

# Before TensorFlow starts: oneDNN's CPU allocator keeps the statistics read here
# (gaviz.gallery.memory.CPU_ALLOCATOR_STATS_ENV). TensorFlow turns oneDNN on by itself
# only on CPUs with AVX-512; child processes inherit the setting.
os.environ.update({"TF_ENABLE_ONEDNN_OPTS": "1"})

import harness  # noqa: E402  first: it quiets TensorFlow before TensorFlow is imported
import keras
import numpy as np
import tensorflow as tf

import gaviz

SIZE, CLASSES, MICRO, K, LR = 32, 10, 32, 8, 0.01
WIDTH = 2048  # of the two dense layers: the parameters (16.6 MiB) are mostly theirs


def make_model(width=WIDTH):
    keras.utils.set_random_seed(0)
    conv = dict(kernel_size=3, padding="same", activation="relu")
    return keras.Sequential(
        [
            keras.Input((SIZE, SIZE, 3)),
            keras.layers.Conv2D(32, **conv),
            keras.layers.Conv2D(32, **conv),
            keras.layers.Conv2D(64, **conv),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )


def data(samples, batch):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, SIZE, SIZE, 3)).astype("float32")
    y = rng.integers(0, CLASSES, size=(samples,)).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def loss_object():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def gaviz_epoch(model, dataset, accumulation_steps):
    trainer = gaviz.AccumulationTrainer(
        model, keras.optimizers.SGD(LR), loss_object(), accumulation_steps
    )
    return lambda: trainer.fit(dataset, epochs=1, verbose=0)


def gaviz_arrays_epoch(model, dataset, accumulation_steps, jit_compile=False):
    """gaviz given the arrays (micro-batches gathered inside the graph)."""
    x, y = (np.concatenate(part) for part in zip(*dataset.as_numpy_iterator()))
    batch = int(next(iter(dataset))[0].shape[0])
    trainer = gaviz.AccumulationTrainer(
        model, keras.optimizers.SGD(LR), loss_object(), accumulation_steps,
        jit_compile=jit_compile,
    )
    return lambda: trainer.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)


def plain_epoch(model, dataset, jit_compile=False):
    """The textbook step: one batch, one gradient, one update; no accumulation."""
    optimizer, loss_fn = keras.optimizers.SGD(LR), loss_object()

    @tf.function(jit_compile=jit_compile)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def epoch():
        for x, y in dataset:
            step(x, y)

    return epoch


GAVIZ = f"gaviz, micro-batch {MICRO} x k = {K}"
GAVIZ_ARRAYS = f"gaviz on arrays, micro-batch {MICRO} x k = {K}"
PLAIN_SMALL = f"plain step, batch {MICRO}"
PLAIN_BIG = f"plain step, batch {MICRO * K}"
GAVIZ_XLA = f"gaviz on arrays, jit_compile=True, micro-batch {MICRO} x k = {K}"
PLAIN_XLA = f"plain step under XLA, batch {MICRO}"
# name -> (batch size of the dataset, epoch maker taking (model, dataset))
CONFIGURATIONS = {
    GAVIZ: (MICRO, functools.partial(gaviz_epoch, accumulation_steps=K)),
    PLAIN_SMALL: (MICRO, plain_epoch),
    PLAIN_BIG: (MICRO * K, plain_epoch),
    f"gaviz, k = 1, batch {MICRO * K}": (
        MICRO * K, functools.partial(gaviz_epoch, accumulation_steps=1)
    ),
    GAVIZ_ARRAYS: (MICRO, functools.partial(gaviz_arrays_epoch, accumulation_steps=K)),
    # XLA plans a program's buffers itself: its peak is held to XLA's plain step.
    GAVIZ_XLA: (
        MICRO, functools.partial(gaviz_arrays_epoch, accumulation_steps=K, jit_compile=True)
    ),
    PLAIN_XLA: (MICRO, functools.partial(plain_epoch, jit_compile=True)),
}


def measure(name, samples, width=WIDTH):
    """In a fresh process: one configuration's peak growth during an epoch."""
    batch, make_epoch = CONFIGURATIONS[name]
    model = make_model(width)
    epoch = make_epoch(model, data(samples, batch))
    epoch()  # warm-up: tracing, optimizer slots, first-call allocations
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    gc.collect()
    _, report = gaviz.measure_peak_memory(epoch, device=device)
    sizes = [(int(np.prod(v.shape)), tf.as_dtype(v.dtype).size) for v in model.trainable_variables]
    return {
        "name": name, "device": device, "baseline_bytes": report.baseline_bytes,
        "growth_bytes": report.growth_bytes,
        "parameters": sum(n for n, _ in sizes),
        "parameter_bytes": sum(n * itemsize for n, itemsize in sizes),
    }


def in_child(name, quick):
    command = [sys.executable, __file__, "--child", name] + (["--quick"] if quick else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"Measuring {name!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=list(CONFIGURATIONS), help=argparse.SUPPRESS)
    parser.add_argument("--width", type=int, default=WIDTH, help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes per configuration; the median is reported")
    harness.add_common_arguments(parser, "benchmarks/results/memory.json")
    args = parser.parse_args(argv)
    samples = 512 if args.quick else 1024
    if args.child:
        print(json.dumps(measure(args.child, samples, args.width)))
        return

    processes = 1 if args.quick else args.processes
    measured = {}
    for _ in range(processes):  # alternating, like the timed benchmarks
        for name in CONFIGURATIONS:
            measured.setdefault(name, []).append(in_child(name, args.quick))
    growth = {
        name: statistics.median(m["growth_bytes"] for m in runs)
        for name, runs in measured.items()
    }
    mib = {name: value / 2**20 for name, value in growth.items()}
    first = measured[GAVIZ][0]
    parameter_bytes = first["parameter_bytes"]
    extra = growth[GAVIZ] - growth[PLAIN_SMALL]
    extra_xla = growth[GAVIZ_XLA] - growth[PLAIN_XLA]
    rows = [[name, mib[name], mib[name] / mib[PLAIN_SMALL]] for name in CONFIGURATIONS]
    per_sample = (mib[PLAIN_BIG] - mib[PLAIN_SMALL]) / (MICRO * K - MICRO)
    fixed = mib[PLAIN_SMALL] - MICRO * per_sample
    result = harness.write_result(
        args.json,
        name="memory",
        title="3. Memory: peak during an epoch",
        setup=(
            f"CNN on {SIZE}x{SIZE}x3 images: conv 32-32-64 at full resolution, global "
            f"average pooling, Dense 2048-2048-{CLASSES}; {samples} samples, SGD. Peak of "
            "TensorFlow's allocator during one epoch, above what was in use before it, "
            f"after a warm-up epoch; median of {processes} fresh process(es) per "
            "configuration, run in turns."
        ),
        columns=["configuration", "peak growth (MiB)", "growth / plain batch 32"],
        rows=rows,
        targets=[
            harness.target(
                "accumulation's extra peak over plain batch 32, in parameter bytes",
                extra / parameter_bytes, 1.5, "x parameter bytes", at_least=False,
            ),
            harness.target(
                "with jit_compile=True: accumulation's extra peak over XLA's plain batch 32, "
                "in parameter bytes",
                extra_xla / parameter_bytes, 1.5, "x parameter bytes", at_least=False,
            ),
            harness.target(
                "plain batch 256's peak / accumulation's (the same 256 samples per update)",
                mib[PLAIN_BIG] / mib[GAVIZ], 2.0, "x", at_least=True,
            ),
        ],
        notes=[
            f"{first['parameters']:,} parameters, {parameter_bytes / 2**20:.2f} MiB in "
            f"float32; measured on {first['device']} with "
            "tf.config.experimental.get_memory_info.",
            f"The plain step's peak grows with the batch: {per_sample:.2f} MiB per sample "
            f"(the activations kept for the backward pass), on top of {fixed:.0f} MiB that "
            "does not (gradients of the weights, per-call buffers), by a straight line "
            f"through batch 32 and batch 256; so batch 256 peaks at "
            f"{mib[PLAIN_BIG] / mib[PLAIN_SMALL]:.1f}x batch 32, not 8x.",
            "Run to run, a peak moves by about one activation-sized tensor (4 MiB at "
            "batch 32, 32 MiB at batch 256): the order of independent operations varies. "
            "All runs (MiB): " + "; ".join(
                f"{name}: " + ", ".join(f"{m['growth_bytes'] / 2**20:.1f}" for m in runs)
                for name, runs in measured.items()
            ) + ".",
        ],
        plot={
            "labels": list(CONFIGURATIONS),
            "mib": [mib[name] for name in CONFIGURATIONS],
            "parameter_mib": parameter_bytes / 2**20,
        },
    )
    for row in result["rows"]:
        print(f"{row[0]:<32} {row[1]:8.1f} MiB {row[2]:6.2f}x")
    print(f"parameters: {parameter_bytes / 2**20:.2f} MiB; accumulation's extra: "
          f"{extra / parameter_bytes:.2f}x parameter bytes")


if __name__ == "__main__":
    main()
