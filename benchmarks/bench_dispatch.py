"""1. Dispatch-bound: one epoch of accumulation on a small MLP, five ways.

MLP 64-256-256-1, 8192 samples, micro-batch 32, accumulation_steps 8, SGD.
The model is so small that launching work, not arithmetic, decides the time:
Keras's built-in accumulation and the per-micro-batch ``tf.function`` loop
make one call from Python per micro-batch, the eager loop one per operation,
gaviz one per few updates. The floor rows run the same 256 forward and
backward passes in one graph call and nothing else, once as TensorFlow runs
them and once compiled by XLA: what no trainer can beat without changing the
arithmetic. Each gaviz configuration is held to the faster floor.

    python benchmarks/bench_dispatch.py [--rounds 21] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import os
from functools import partial

import harness  # noqa: F401  (quiets TensorFlow before it is imported)
import keras
import numpy as np
import tensorflow as tf

import gaviz
from gaviz.training.window_loop import XLA_MODES

FEATURES, MICRO, K, LR = 64, 32, 8, 0.01
# Each timed run trains this many epochs in one call, as training would:
# Keras's fit has a set-up cost per call that one-epoch calls would overcount.
EPOCHS_PER_RUN = 3


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


def data(samples):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, FEATURES)).astype("float32")
    y = rng.normal(size=(samples, 1)).astype("float32")
    return x, y


def micro_batches(x, y, micro=MICRO):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(micro).prefetch(2)


def full_data_loss(model, x, y):
    """Mean squared error on all of ``(x, y)``: one forward pass, averaged in float64.

    (bench_scaling.py and bench_allreduce.py compare trainers by it: float64
    so that a difference measures the weights, not the rounding of a float32
    mean over thousands of samples.)
    """
    predictions = np.asarray(model(x, training=False), dtype=np.float64)
    return float(np.mean((predictions - y.astype(np.float64)) ** 2))


def max_weight_difference(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a.get_weights(), b.get_weights()))


def gaviz_epoch(x, y, **options):
    """gaviz given the arrays, as Keras is: micro-batches cut inside the graph;
    ``options`` are the trainer's (none: its defaults)."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K,
                                        **options)
    return lambda epochs: trainer.fit(x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0)


def gaviz_default_xla() -> tuple[str, bool]:
    """What gaviz's default ``jit_compile="auto"`` chooses for the benchmark's
    model on this machine: in words, and whether a call on arrays is one XLA
    program."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K)
    loop = trainer.window_loop
    return XLA_MODES[loop.xla].says, loop.whole_call_compiled


def gaviz_metrics_epoch(x, y):
    """gaviz on arrays with a compiled metric (Keras's MeanAbsoluteError, every micro-batch)."""
    model = make_model()
    model.compile(keras.optimizers.SGD(LR), "mse", metrics=["mae"])
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    return lambda epochs: trainer.fit(x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0)


def gaviz_progress_epoch(x, y):
    """gaviz on arrays with Keras's progress bar (verbose=1), its output discarded."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K)

    def train(epochs):
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            trainer.fit(x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=1)

    return train


def gaviz_dataset_epoch(x, y):
    """gaviz given a tf.data pipeline of micro-batches (the same for every epoch)."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K)
    dataset = micro_batches(x, y)
    return lambda epochs: trainer.fit(dataset, epochs=epochs, verbose=0)


def keras_builtin_epoch(x, y, steps_per_execution=1, optimizer=keras.optimizers.SGD,
                        on_dataset=False):
    """Keras's own option, given the arrays or (``on_dataset``) gaviz's tf.data
    pipeline; ``optimizer`` is the class (bench_own_loop.py passes Adam)."""
    model = make_model()
    model.compile(optimizer(LR, gradient_accumulation_steps=K), "mse",
                  steps_per_execution=steps_per_execution)
    if on_dataset:
        dataset = micro_batches(x, y)
        return lambda epochs: model.fit(dataset, epochs=epochs, verbose=0)
    return lambda epochs: model.fit(
        x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0
    )


def keras_default_xla() -> str:
    """What Keras's default ``jit_compile="auto"`` chooses for the benchmark's
    model on this machine, in words (Keras 3 leaves XLA off on a machine with
    no GPU)."""
    model = make_model()
    model.compile(keras.optimizers.SGD(LR), "mse")
    return "XLA" if model.jit_compile else "no XLA"


def keras_big_batch_epoch(x, y):
    model = make_model()
    model.compile(keras.optimizers.SGD(LR), "mse")
    return lambda epochs: model.fit(
        x, y, batch_size=MICRO * K, epochs=epochs, shuffle=False, verbose=0
    )


def per_micro_batch_function_epoch(x, y):
    """A tf.function per micro-batch plus a tf.function apply every K: the
    usual "graph mode" accumulation loop, dispatching K+1 graphs per update."""
    model, optimizer = make_model(), keras.optimizers.SGD(LR)
    accumulators = [tf.Variable(tf.zeros(v.shape)) for v in model.trainable_variables]
    optimizer.build(model.trainable_variables)
    dataset = micro_batches(x, y)

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

    def train(epochs):
        for _ in range(epochs):
            count, steps = 0.0, 0
            for xb, yb in dataset:
                count += float(micro_step(xb, yb))
                steps += 1
                if steps % K == 0:
                    apply(tf.constant(count))
                    count = 0.0
            if count:
                apply(tf.constant(count))

    return train


def eager_tape_epoch(x, y):
    """The articles' loop: eager GradientTape, Python lists as accumulators."""
    model, optimizer = make_model(), keras.optimizers.SGD(LR)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)

    def train(epochs):
        for _ in range(epochs):
            accumulated = [tf.zeros(v.shape) for v in model.trainable_variables]
            for step, (xb, yb) in enumerate(dataset):
                with tf.GradientTape() as tape:
                    y_pred = model(xb, training=True)
                    loss = tf.reduce_mean(keras.losses.mean_squared_error(yb, y_pred))
                grads = tape.gradient(loss, model.trainable_variables)
                accumulated = [a + g / K for a, g in zip(accumulated, grads)]
                if (step + 1) % K == 0:
                    optimizer.apply_gradients(zip(accumulated, model.trainable_variables))
                    accumulated = [tf.zeros(v.shape) for v in model.trainable_variables]

    return train


def floor_epoch(x, y, jit_compile=False, one_at_a_time=False):
    """The same forward and backward passes over the micro-batches in one
    graph call, and nothing else: no update, no metric, no Python.

    Args:
        jit_compile: compile the call with XLA (whose loop runs its
            iterations in order anyway).
        one_at_a_time: run the micro-steps one after another, as gaviz does
            (``parallel_iterations=1``); otherwise TensorFlow may overlap up
            to 10 of them.
    """
    model = make_model()
    xs, ys = tf.constant(x), tf.constant(y)
    steps = len(x) // MICRO
    parallel_iterations = 1 if one_at_a_time else 10  # 10: tf.while_loop's default

    @tf.function(jit_compile=jit_compile)
    def passes():
        sums = [tf.zeros_like(v) for v in model.trainable_variables]
        i = tf.constant(0)
        while i < steps:
            tf.autograph.experimental.set_loop_options(parallel_iterations=parallel_iterations)
            # The real micro-batches: one repeated would let XLA hoist the
            # whole pass out of the loop.
            xb = tf.slice(xs, [i * MICRO, 0], [MICRO, FEATURES])
            yb = tf.slice(ys, [i * MICRO, 0], [MICRO, 1])
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(keras.losses.mean_squared_error(yb, model(xb, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            sums = [s + g for s, g in zip(sums, grads)]
            i += 1
        # Every sum is returned: a pass whose result is unused would be pruned.
        return sums

    def train(epochs):
        for _ in range(epochs):
            [s.numpy() for s in passes()]

    return train


GAVIZ = "gaviz AccumulationTrainer, arrays, its defaults (jit_compile=\"auto\", windows_per_call=\"auto\")"
GAVIZ_PLAIN = "gaviz on arrays, jit_compile=False (plain TensorFlow graphs)"
GAVIZ_DATASET = "gaviz AccumulationTrainer, a tf.data pipeline of micro-batches, its defaults"
GAVIZ_METRICS = "gaviz on arrays, with metrics=[\"mae\"]"
GAVIZ_PROGRESS = "gaviz on arrays, with Keras's progress bar (verbose=1)"
#: Keras's steps_per_execution values tried; "Keras at its best" is the fastest.
KERAS_STEPS_PER_EXECUTION = (1, 8, 64, 256)
#: The same for Keras given gaviz's tf.data pipeline (1 is far behind on arrays).
KERAS_DATASET_STEPS_PER_EXECUTION = (8, 64, 256)


def keras_label(steps_per_execution):
    return (f"Keras Model.fit, gradient_accumulation_steps=8, "
            f"steps_per_execution={steps_per_execution}")


def keras_dataset_label(steps_per_execution):
    return (f"Keras Model.fit on the same tf.data pipeline, gradient_accumulation_steps=8, "
            f"steps_per_execution={steps_per_execution}")


KERAS = keras_label(1)
FLOOR = "floor: the same forward/backward passes over the micro-batches in one graph call, no updates"
FLOOR_XLA = "floor under XLA: the same passes over the micro-batches, one at a time, no updates"
SHORT_LABELS = ["gaviz", "gaviz, no XLA", "gaviz + metric", "gaviz + progress bar", "gaviz, tf.data",
                *(f"Keras built-in, spe {s}" for s in KERAS_STEPS_PER_EXECUTION),
                *(f"Keras built-in, tf.data, spe {s}" for s in KERAS_DATASET_STEPS_PER_EXECUTION),
                "tf.function per micro-batch", "eager loop", "Keras fit, batch 256",
                "floor (compute only)", "floor, XLA"]
CONTESTANTS = {
    GAVIZ: gaviz_epoch,
    GAVIZ_PLAIN: partial(gaviz_epoch, jit_compile=False),
    GAVIZ_METRICS: gaviz_metrics_epoch,
    GAVIZ_PROGRESS: gaviz_progress_epoch,
    GAVIZ_DATASET: gaviz_dataset_epoch,
    **{keras_label(s): partial(keras_builtin_epoch, steps_per_execution=s)
       for s in KERAS_STEPS_PER_EXECUTION},
    **{keras_dataset_label(s): partial(keras_builtin_epoch, steps_per_execution=s, on_dataset=True)
       for s in KERAS_DATASET_STEPS_PER_EXECUTION},
    "tf.function per micro-batch + apply every 8": per_micro_batch_function_epoch,
    "eager GradientTape loop (the articles')": eager_tape_epoch,
    "Keras Model.fit at plain batch 256 (no accumulation)": keras_big_batch_epoch,
    FLOOR: floor_epoch,
    FLOOR_XLA: partial(floor_epoch, jit_compile=True),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    harness.add_common_arguments(parser, "benchmarks/results/dispatch.json")
    args = parser.parse_args(argv)
    samples, rounds = (1024, 2) if args.quick else (8192, args.rounds)
    epochs = 1 if args.quick else EPOCHS_PER_RUN

    x, y = data(samples)
    runs = {name: make(x, y) for name, make in CONTESTANTS.items()}
    times = harness.alternate({name: partial(run, epochs) for name, run in runs.items()}, rounds)
    times = {name: [t / epochs for t in run_times] for name, run_times in times.items()}
    base = harness.median_ms(times[GAVIZ])
    rows = [[name, harness.median_ms(t), harness.median_ms(t) / base] for name, t in times.items()]
    keras_default_ms = harness.median_ms(times[KERAS])
    keras_best = min((keras_label(s) for s in KERAS_STEPS_PER_EXECUTION),
                     key=lambda name: harness.median_ms(times[name]))
    keras_ms = harness.median_ms(times[keras_best])
    keras_dataset_best = min((keras_dataset_label(s) for s in KERAS_DATASET_STEPS_PER_EXECUTION),
                             key=lambda name: harness.median_ms(times[name]))
    keras_dataset_ms = harness.median_ms(times[keras_dataset_best])
    dataset_ms = harness.median_ms(times[GAVIZ_DATASET])
    plain_ms = harness.median_ms(times[GAVIZ_PLAIN])
    floor_ms = harness.median_ms(times[FLOOR])
    floor_xla_ms = harness.median_ms(times[FLOOR_XLA])
    best_ms, best_floor_ms = min(base, plain_ms), min(floor_ms, floor_xla_ms)
    chosen, default_compiled = gaviz_default_xla()
    # The floor of gaviz's default: compiled by XLA where the default is.
    default_floor, floor_kind = (floor_xla_ms, "XLA") if default_compiled else (floor_ms, "plain")
    keras_ratio = keras_ms / best_ms
    micro_batches = samples // MICRO
    best_spe = keras_best.rsplit("=", 1)[1]
    notes = [
        f"gaviz's default, jit_compile=\"auto\", chooses for this MLP on this machine: XLA "
        f"{chosen}. Keras's own default jit_compile here is {keras_default_xla()} (Keras "
        "3 leaves XLA off on a machine without a GPU).",
        f"Keras at its best here is steps_per_execution={best_spe}: {keras_ms:.0f} ms, "
        f"{keras_ms / base:.2f}x gaviz's default time ({base:.0f} ms) and "
        f"{keras_ms / plain_ms:.2f}x gaviz's with jit_compile=False ({plain_ms:.0f} ms); at "
        f"its default (1), {keras_default_ms:.0f} ms, {keras_default_ms / base:.2f}x gaviz's "
        "default.",
        f"The floors: {floor_ms:.0f} ms as TensorFlow runs the passes, {floor_xla_ms:.0f} ms "
        f"compiled by XLA ({'slower' if floor_xla_ms > floor_ms else 'faster'}: the same "
        f"matrix products, XLA's kernels against TensorFlow's oneDNN ones). gaviz's "
        f"default is {base / default_floor:.2f}x the {floor_kind} floor: what it adds around "
        f"the arithmetic (gathers, windows, updates) is {base - default_floor:.0f} ms; "
        f"without XLA, gaviz adds {plain_ms - floor_ms:.0f} ms to its floor "
        f"({(plain_ms - floor_ms) / micro_batches * 1000:.0f} µs per micro-batch: the "
        f"micro-step loop, gathering each micro-batch, and {micro_batches // K} updates in a "
        "few graph calls; the floor's loop may overlap micro-steps, gaviz's runs one at a "
        "time, to keep one micro-batch's activations alive).",
        f"A compiled metric (mae, updated on every micro-batch) costs "
        f"{harness.median_ms(times[GAVIZ_METRICS]) / base - 1:+.0%}; Keras's progress bar "
        f"(verbose=1) {harness.median_ms(times[GAVIZ_PROGRESS]) / base - 1:+.0%}.",
        f"Given a tf.data pipeline instead of the arrays, gaviz takes {dataset_ms:.0f} ms "
        f"(its micro-steps are not compiled: a dataset's iterator cannot be, and "
        f"micro-steps compiled one by one measured slower): gaviz on the pipeline / gaviz "
        f"on the arrays: {dataset_ms / base:.2f}x, and {dataset_ms / plain_ms:.2f}x gaviz "
        "on the arrays without XLA. Keras's fit builds a tf.data pipeline from arrays too.",
        f"On the same tf.data pipeline, Keras at its best "
        f"(steps_per_execution={keras_dataset_best.rsplit('=', 1)[1]}) "
        f"takes {keras_dataset_ms:.0f} ms: {keras_dataset_ms / dataset_ms:.2f}x gaviz's "
        f"default on it ({dataset_ms:.0f} ms). Keras's steps_per_execution loop leaves "
        "tf.while_loop's parallel_iterations at its default, 10: TensorFlow overlaps "
        "consecutive steps, and their activations are alive together. gaviz runs one "
        "micro-step at a time, so that one micro-batch's activations are (the memory "
        "benchmark's promise).",
    ]
    result = harness.write_result(
        args.json,
        name="dispatch",
        title="1. Dispatch-bound: a small MLP, one epoch",
        setup=(
            f"MLP {FEATURES}-256-256-1, {samples} samples, micro-batch {MICRO}, k = {K}, SGD; "
            f"time per epoch: median of {rounds} alternating runs of {epochs} epoch(s) each "
            "(one fit call per run), after one warm-up run."
        ),
        columns=["trainer", "median epoch (ms)", "time / gaviz"],
        rows=rows,
        targets=[
            harness.target("Keras built-in at its best steps_per_execution / gaviz at its "
                           "best (with XLA or not)", keras_ratio, 2.0, "x",
                           at_least=True),
            harness.target("gaviz's default / the faster compute floor",
                           base / best_floor_ms, 1.5, "x", at_least=False),
            harness.target("gaviz with jit_compile=False / the compute floor",
                           plain_ms / floor_ms, 1.5, "x", at_least=False),
            harness.target("Keras at its best / gaviz's default, on arrays",
                           keras_ms / base, 3.0, "x", at_least=True),
            harness.target("Keras at its best / gaviz's default, on one tf.data pipeline",
                           keras_dataset_ms / dataset_ms, 3.0, "x",
                           at_least=True),
        ],
        notes=notes,
        plot={"labels": SHORT_LABELS, "ms": [r[1] for r in rows]},
    )
    for row in result["rows"]:
        print(f"{row[0]:<80} {row[1]:8.1f} ms {row[2]:6.2f}x")


if __name__ == "__main__":
    main()
