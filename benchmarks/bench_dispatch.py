"""Dispatch-bound benchmark: one epoch of accumulation on a small MLP.

MLP 64-256-256-1, 8192 samples, micro-batch 32, accumulation_steps 8, SGD.
Each contestant trains one warm-up epoch, then the contestants take turns
(round-robin, order rotated each round) and we report the median epoch time
and its ratio to gaviz, all measured in this one run.

    python benchmarks/bench_trainer.py [--rounds 7] [--out benchmarks/results.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gaviz  # noqa: E402

SAMPLES, FEATURES, MICRO, K, LR = 8192, 64, 32, 8, 0.01


def make_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(1),
        ]
    )


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, FEATURES)).astype("float32")
    y = rng.normal(size=(SAMPLES, 1)).astype("float32")
    return x, y


def gaviz_epoch(x, y):
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO).prefetch(2)
    return lambda: trainer.fit(ds, epochs=1)


def keras_builtin_epoch(x, y):
    model = make_model()
    model.compile(keras.optimizers.SGD(LR, gradient_accumulation_steps=K), "mse")
    return lambda: model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)


def keras_big_batch_epoch(x, y):
    model = make_model()
    model.compile(keras.optimizers.SGD(LR), "mse")
    return lambda: model.fit(x, y, batch_size=MICRO * K, epochs=1, shuffle=False, verbose=0)


def _accumulators(model):
    return [tf.Variable(tf.zeros(v.shape)) for v in model.trainable_variables]


def per_micro_batch_function_epoch(x, y):
    """A tf.function per micro-batch plus a tf.function apply every K: the
    usual "graph mode" accumulation loop, dispatching K+1 graphs per update."""
    model, optimizer = make_model(), keras.optimizers.SGD(LR)
    accumulators = _accumulators(model)
    optimizer.build(model.trainable_variables)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO).prefetch(2)

    @tf.function
    def micro_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(keras.losses.mean_squared_error(yb, model(xb, training=True)))
        for a, g in zip(accumulators, tape.gradient(loss, model.trainable_variables)):
            a.assign_add(g)
        return tf.cast(tf.shape(xb)[0], tf.float32)

    @tf.function
    def apply(count):
        optimizer.apply_gradients(
            zip([a / count for a in accumulators], model.trainable_variables)
        )
        for a in accumulators:
            a.assign(tf.zeros_like(a))

    def epoch():
        count, steps = 0.0, 0
        for xb, yb in ds:
            count += float(micro_step(xb, yb))
            steps += 1
            if steps % K == 0:
                apply(tf.constant(count))
                count = 0.0
        if count:
            apply(tf.constant(count))

    return epoch


def eager_tape_epoch(x, y):
    """The articles' loop: eager GradientTape, Python lists as accumulators."""
    model, optimizer = make_model(), keras.optimizers.SGD(LR)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)

    def epoch():
        accumulated = [tf.zeros(v.shape) for v in model.trainable_variables]
        for step, (xb, yb) in enumerate(ds):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.mean_squared_error(yb, model(xb, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            accumulated = [a + g / K for a, g in zip(accumulated, grads)]
            if (step + 1) % K == 0:
                optimizer.apply_gradients(zip(accumulated, model.trainable_variables))
                accumulated = [tf.zeros(v.shape) for v in model.trainable_variables]

    return epoch


CONTESTANTS = {
    "gaviz AccumulationTrainer (one graph call per update)": gaviz_epoch,
    "Keras Model.fit, gradient_accumulation_steps=8": keras_builtin_epoch,
    "tf.function per micro-batch + apply every 8": per_micro_batch_function_epoch,
    "eager GradientTape loop (the articles')": eager_tape_epoch,
    "Keras Model.fit at plain batch 256 (no accumulation)": keras_big_batch_epoch,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=None, help="write the markdown table here too")
    args = parser.parse_args(argv)

    x, y = data()
    epochs = {name: make(x, y) for name, make in CONTESTANTS.items()}
    for epoch in epochs.values():  # warm-up: tracing and first-call costs excluded
        epoch()
    times = {name: [] for name in epochs}
    names = list(epochs)
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            epochs[name]()
            times[name].append(time.perf_counter() - start)

    base = statistics.median(times[names[0]])
    lines = [
        f"MLP {FEATURES}-256-256-1, {SAMPLES} samples, micro-batch {MICRO}, k={K}, SGD; "
        f"median of {args.rounds} alternating epochs after one warm-up; "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPU cores, "
        f"{platform.machine()}.",
        "",
        "| trainer | median epoch (ms) | time / gaviz |",
        "| --- | ---: | ---: |",
    ]
    for name in names:
        median = statistics.median(times[name])
        lines.append(f"| {name} | {median * 1000:.0f} | {median / base:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write("# Trainer benchmark\n\n" + table + "\n")


if __name__ == "__main__":
    main()
