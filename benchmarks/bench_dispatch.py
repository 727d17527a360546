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
from gaviz.training.fit.compiling import AUTO_XLA_AFTER_MICRO_STEPS, XLA_MODES

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


def iterated(dataset):
    """``dataset`` with a map that changes nothing: a pipeline that only slices
    and batches is cut like arrays by gaviz, any other is iterated."""
    return dataset.map(lambda *element: element)


def csv_lines(x, y):
    """Each sample as a line of text: its features and target, comma-separated."""
    return np.array([",".join(f"{v:.7g}" for v in row) for row in np.hstack([x, y])])


def parsed_micro_batches(lines, micro=MICRO):
    """A pipeline that does work: it parses text lines into numbers in ``map``,
    in parallel (AUTOTUNE), as a CSV reader's does, then batches and prefetches."""
    defaults = [0.0] * (FEATURES + 1)

    def parse(line):
        fields = tf.io.decode_csv(line, defaults)
        return tf.stack(fields[:-1]), tf.stack(fields[-1:])

    return (tf.data.Dataset.from_tensor_slices(lines)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(micro).prefetch(tf.data.AUTOTUNE))


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


def past_auto_xla(train, samples):
    """Runs ``train(epochs)`` until ``jit_compile="auto"`` has had its turn
    for XLA (plain graphs for the trainer's first AUTO_XLA_AFTER_MICRO_STEPS
    micro-steps): the timed runs then measure what a long run runs. Returns
    ``train``."""
    micro_batches_per_epoch = -(-samples // MICRO)
    train(-(-AUTO_XLA_AFTER_MICRO_STEPS // micro_batches_per_epoch) + 1)
    return train


def gaviz_epoch(x, y, **options):
    """gaviz given the arrays, as Keras is: micro-batches cut inside the graph;
    ``options`` are the trainer's (none: its defaults, past auto's turn for XLA)."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K,
                                        **options)
    return past_auto_xla(lambda epochs: trainer.fit(
        x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0), len(x))


def gaviz_first_epoch(x, y, **options):
    """A fresh gaviz trainer, as a short run meets it."""
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
    return past_auto_xla(lambda epochs: trainer.fit(
        x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0), len(x))


def gaviz_progress_epoch(x, y):
    """gaviz on arrays with Keras's progress bar (verbose=1), its output discarded."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K)

    def train(epochs):
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            trainer.fit(x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=1)

    return past_auto_xla(train, len(x))


def gaviz_dataset_epoch(x, y, pipeline=micro_batches, read_as_arrays=True):
    """gaviz given a tf.data pipeline of micro-batches (the same for every
    epoch): ``pipeline(x, y)`` makes it; one ``read_as_arrays`` is run past
    auto's turn for XLA, as arrays are."""
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", K)
    dataset = pipeline(x, y)
    train = lambda epochs: trainer.fit(dataset, epochs=epochs, verbose=0)  # noqa: E731
    return past_auto_xla(train, len(x)) if read_as_arrays else train


def parsing_pipeline(x, y):
    return parsed_micro_batches(csv_lines(x, y))


def reading(dataset):
    """Reading ``dataset`` alone, in one graph call per epoch: no model."""
    @tf.function
    def read():
        count = tf.constant(0.0)
        for xb, yb in iter(dataset):
            count += tf.reduce_sum(xb[:, 0]) + tf.reduce_sum(yb)
        return count

    def train(epochs):
        for _ in range(epochs):
            read().numpy()

    return train


def read_pipeline_epoch(x, y, pipeline=parsing_pipeline):
    """Reading the pipeline alone, in one graph call per epoch: no model."""
    return reading(pipeline(x, y))


def keras_builtin_epoch(x, y, steps_per_execution=1, optimizer=keras.optimizers.SGD,
                        on_dataset=None):
    """Keras's own option, given the arrays or a tf.data pipeline
    (``on_dataset(x, y)`` makes it); ``optimizer`` is the class
    (bench_own_loop.py passes Adam)."""
    model = make_model()
    model.compile(optimizer(LR, gradient_accumulation_steps=K), "mse",
                  steps_per_execution=steps_per_execution)
    if on_dataset is not None:
        dataset = on_dataset(x, y)
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


def floor_epoch(x, y, jit_compile=False, one_at_a_time=False, dataset=None):
    """The same forward and backward passes over the micro-batches in one
    graph call, and nothing else: no update, no metric, no Python.

    Args:
        jit_compile: compile the call with XLA (whose loop runs its
            iterations in order anyway).
        one_at_a_time: run the micro-steps one after another, as gaviz does
            (``parallel_iterations=1``); otherwise TensorFlow may overlap up
            to 10 of them.
        dataset: read the micro-batches from this tf.data pipeline, one pass
            per epoch, instead of slicing the arrays: the passes as the
            pipeline feeds them (not with ``jit_compile``: XLA cannot compile
            an iterator).
    """
    model = make_model()
    xs, ys = tf.constant(x), tf.constant(y)
    steps = len(x) // MICRO
    parallel_iterations = 1 if one_at_a_time else 10  # 10: tf.while_loop's default

    def micro_step(xb, yb, sums):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(keras.losses.mean_squared_error(yb, model(xb, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        return [s + g for s, g in zip(sums, grads)]

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
            sums = micro_step(xb, yb, sums)
            i += 1
        # Every sum is returned: a pass whose result is unused would be pruned.
        return sums

    @tf.function
    def fed_passes():
        sums = [tf.zeros_like(v) for v in model.trainable_variables]
        for xb, yb in iter(dataset):
            tf.autograph.experimental.set_loop_options(parallel_iterations=parallel_iterations)
            sums = micro_step(xb, yb, sums)
        return sums

    run = passes if dataset is None else fed_passes

    def train(epochs):
        for _ in range(epochs):
            [s.numpy() for s in run()]

    return train


GAVIZ = "gaviz AccumulationTrainer, arrays, its defaults (jit_compile=\"auto\", windows_per_call=\"auto\")"
GAVIZ_PLAIN = "gaviz on arrays, jit_compile=False (plain TensorFlow graphs)"
GAVIZ_DATASET = "gaviz AccumulationTrainer, a tf.data pipeline of micro-batches, its defaults"
GAVIZ_ITERATED = "gaviz, the same pipeline with a map that changes nothing (so iterated)"
GAVIZ_PARSED = "gaviz, a pipeline that parses CSV lines (map with AUTOTUNE), its defaults"
GAVIZ_METRICS = "gaviz on arrays, with metrics=[\"mae\"]"
GAVIZ_PROGRESS = "gaviz on arrays, with Keras's progress bar (verbose=1)"
READ_PARSED = "reading the CSV-parsing pipeline alone (no model)"
#: Keras's steps_per_execution values tried; "Keras at its best" is the fastest.
KERAS_STEPS_PER_EXECUTION = (1, 8, 64, 256)
#: The same for Keras given a tf.data pipeline (1 is far behind on arrays).
KERAS_DATASET_STEPS_PER_EXECUTION = (8, 64, 256)


def keras_label(steps_per_execution):
    return (f"Keras Model.fit, gradient_accumulation_steps=8, "
            f"steps_per_execution={steps_per_execution}")


def keras_dataset_label(steps_per_execution):
    return (f"Keras Model.fit on the same tf.data pipeline, gradient_accumulation_steps=8, "
            f"steps_per_execution={steps_per_execution}")


def keras_parsed_label(steps_per_execution):
    return (f"Keras Model.fit on the CSV-parsing pipeline, gradient_accumulation_steps=8, "
            f"steps_per_execution={steps_per_execution}")


KERAS = keras_label(1)
FLOOR = "floor: the same forward/backward passes over the micro-batches in one graph call, no updates"
FLOOR_XLA = "floor under XLA: the same passes over the micro-batches, one at a time, no updates"
SHORT_LABELS = ["gaviz", "gaviz, no XLA", "gaviz + metric", "gaviz + progress bar", "gaviz, tf.data",
                "gaviz, tf.data iterated", "gaviz, CSV pipeline",
                *(f"Keras built-in, spe {s}" for s in KERAS_STEPS_PER_EXECUTION),
                *(f"Keras built-in, tf.data, spe {s}" for s in KERAS_DATASET_STEPS_PER_EXECUTION),
                *(f"Keras built-in, CSV pipeline, spe {s}" for s in KERAS_DATASET_STEPS_PER_EXECUTION),
                "reading the CSV pipeline", "tf.function per micro-batch", "eager loop",
                "Keras fit, batch 256", "floor (compute only)", "floor, XLA"]
CONTESTANTS = {
    GAVIZ: gaviz_epoch,
    GAVIZ_PLAIN: partial(gaviz_epoch, jit_compile=False),
    GAVIZ_METRICS: gaviz_metrics_epoch,
    GAVIZ_PROGRESS: gaviz_progress_epoch,
    GAVIZ_DATASET: gaviz_dataset_epoch,
    GAVIZ_ITERATED: partial(gaviz_dataset_epoch, read_as_arrays=False,
                            pipeline=lambda x, y: iterated(micro_batches(x, y))),
    GAVIZ_PARSED: partial(gaviz_dataset_epoch, pipeline=parsing_pipeline, read_as_arrays=False),
    **{keras_label(s): partial(keras_builtin_epoch, steps_per_execution=s)
       for s in KERAS_STEPS_PER_EXECUTION},
    **{keras_dataset_label(s): partial(keras_builtin_epoch, steps_per_execution=s,
                                       on_dataset=micro_batches)
       for s in KERAS_DATASET_STEPS_PER_EXECUTION},
    **{keras_parsed_label(s): partial(keras_builtin_epoch, steps_per_execution=s,
                                      on_dataset=parsing_pipeline)
       for s in KERAS_DATASET_STEPS_PER_EXECUTION},
    READ_PARSED: read_pipeline_epoch,
    "tf.function per micro-batch + apply every 8": per_micro_batch_function_epoch,
    "eager GradientTape loop (the articles')": eager_tape_epoch,
    "Keras Model.fit at plain batch 256 (no accumulation)": keras_big_batch_epoch,
    FLOOR: floor_epoch,
    FLOOR_XLA: partial(floor_epoch, jit_compile=True),
}

#: The first epoch of a fresh model, tracing and compiling included: what a
#: short run pays before the steady state above.
FIRST_EPOCH = {
    "gaviz's default (jit_compile=\"auto\")": gaviz_first_epoch,
    "gaviz, jit_compile=True": partial(gaviz_first_epoch, jit_compile=True),
    "Keras's default (steps_per_execution=1)": keras_builtin_epoch,
    "Keras, steps_per_execution=256": partial(keras_builtin_epoch, steps_per_execution=256),
}


def first_epochs(x, y, repeats: int) -> dict[str, float]:
    """Median seconds of a first epoch, a fresh model each time, taking turns."""
    times = {name: [] for name in FIRST_EPOCH}
    for _ in range(repeats):
        for name, make in FIRST_EPOCH.items():
            run = make(x, y)
            times[name].append(harness.timed(partial(run, 1)))
    return {name: harness.median_ms(t) / 1000 for name, t in times.items()}


#: A tiny GPT-2 (KerasHub, built from its config: no download) fine-tuned on
#: token ids for one short epoch: sequences, length, micro-batch.
GPT2_SEQUENCES, GPT2_LENGTH, GPT2_MICRO = 256, 32, 8


def gpt2_task():
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=512, num_layers=2, num_heads=2, hidden_dim=64, intermediate_dim=128,
        max_sequence_length=GPT2_LENGTH, dropout=0.0)
    task = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
    task.compile(optimizer=keras.optimizers.Adam(1e-3))  # the task's own loss
    return task


def gpt2_data(quick: bool):
    rows = GPT2_SEQUENCES // (4 if quick else 1)
    tokens = np.random.default_rng(0).integers(1, 512, size=(rows, GPT2_LENGTH + 1))
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((rows, GPT2_LENGTH), bool)}
    return x, tokens[:, 1:], np.ones((rows, GPT2_LENGTH), "float32")


def gpt2_first_epochs(repeats: int, quick: bool) -> dict[str, float] | None:
    """Median seconds of a first epoch of the tiny GPT-2, compile included:
    gaviz's default (k = 4 micro-batches of 8) against the task's own fit at
    batch 32; None where KerasHub is not installed."""
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        return None
    x, y, w = gpt2_data(quick)
    runs = {
        "gaviz's default (jit_compile=\"auto\")": lambda: gaviz.AccumulationTrainer(
            gpt2_task(), accumulation_steps=4).fit(
                x, y, sample_weight=w, batch_size=GPT2_MICRO, epochs=1, verbose=0),
        "the task's own fit (Model.fit's defaults)": lambda: gpt2_task().fit(
            x, y, sample_weight=w, batch_size=4 * GPT2_MICRO, epochs=1, verbose=0),
    }
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(harness.timed(run))
    return {name: harness.median_ms(t) / 1000 for name, t in times.items()}


def fastest(times, labels):
    """The label among ``labels`` with the smallest median."""
    return min(labels, key=lambda name: harness.median_ms(times[name]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    harness.add_common_arguments(parser, "benchmarks/results/dispatch.json")
    args = parser.parse_args(argv)
    samples, rounds = (1024, 2) if args.quick else (8192, args.rounds)
    epochs = 1 if args.quick else EPOCHS_PER_RUN

    x, y = data(samples)
    first = first_epochs(x, y, 1 if args.quick else 3)
    gpt2_first = gpt2_first_epochs(1 if args.quick else 3, args.quick)
    runs = {name: make(x, y) for name, make in CONTESTANTS.items()}
    times = harness.alternate({name: partial(run, epochs) for name, run in runs.items()}, rounds)
    times = {name: [t / epochs for t in run_times] for name, run_times in times.items()}
    ms = {name: harness.median_ms(t) for name, t in times.items()}
    base = ms[GAVIZ]
    rows = [[name, ms[name], ms[name] / base] for name in times]
    keras_default_ms = ms[KERAS]
    keras_best = fastest(times, [keras_label(s) for s in KERAS_STEPS_PER_EXECUTION])
    keras_ms = ms[keras_best]
    keras_dataset_best = fastest(times, [keras_dataset_label(s)
                                         for s in KERAS_DATASET_STEPS_PER_EXECUTION])
    keras_dataset_ms = ms[keras_dataset_best]
    keras_parsed_best = fastest(times, [keras_parsed_label(s)
                                        for s in KERAS_DATASET_STEPS_PER_EXECUTION])
    keras_parsed_ms = ms[keras_parsed_best]
    dataset_ms, iterated_ms, parsed_ms = ms[GAVIZ_DATASET], ms[GAVIZ_ITERATED], ms[GAVIZ_PARSED]
    plain_ms, floor_ms, floor_xla_ms = ms[GAVIZ_PLAIN], ms[FLOOR], ms[FLOOR_XLA]
    best_floor_ms = min(floor_ms, floor_xla_ms)
    chosen, default_compiled = gaviz_default_xla()
    # The floor of gaviz's default: compiled by XLA where the default is.
    default_floor, floor_kind = (floor_xla_ms, "XLA") if default_compiled else (floor_ms, "plain")
    micro_batches_per_epoch = samples // MICRO
    best_spe = keras_best.rsplit("=", 1)[1]
    spe = lambda label: label.rsplit("=", 1)[1]  # noqa: E731
    gaviz_first, keras_first = first[next(iter(FIRST_EPOCH))], first[list(FIRST_EPOCH)[2]]
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
        f"compiled by XLA. gaviz's default is {base / default_floor:.2f}x the {floor_kind} "
        f"floor: what it adds around the arithmetic (gathers, windows, updates) is "
        f"{base - default_floor:.0f} ms; without XLA, gaviz adds {plain_ms - floor_ms:.0f} ms "
        f"to its floor ({(plain_ms - floor_ms) / micro_batches_per_epoch * 1000:.0f} µs per "
        f"micro-batch: the micro-step loop, gathering each micro-batch, and "
        f"{micro_batches_per_epoch // K} updates in a few graph calls). On this small model "
        "two micro-steps run at once (gaviz.training.loop.overlap: a second one in flight holds "
        "a few hundred KiB), as the floor's loop overlaps up to 10.",
        f"A compiled metric (mae, updated on every micro-batch) costs "
        f"{ms[GAVIZ_METRICS] / base - 1:+.0%}; Keras's progress bar "
        f"(verbose=1) {ms[GAVIZ_PROGRESS] / base - 1:+.0%}.",
        f"Given the tf.data pipeline of micro-batches (from_tensor_slices, batch, prefetch), "
        f"gaviz takes {dataset_ms:.0f} ms, {dataset_ms / base:.2f}x gaviz on the arrays: a "
        "pipeline that only slices in-memory arrays and batches them gives the same "
        "micro-batches every pass, so gaviz cuts them from its arrays in the graph, as "
        f"from arrays. Keras at its best on that pipeline (steps_per_execution="
        f"{spe(keras_dataset_best)}) takes {keras_dataset_ms:.0f} ms: "
        f"{keras_dataset_ms / dataset_ms:.2f}x gaviz's default on it.",
        f"The same pipeline with a map that changes nothing is iterated, as any pipeline "
        f"that maps, shuffles or reads files is: {iterated_ms:.0f} ms, "
        f"{keras_dataset_ms / iterated_ms:.2f}x faster than Keras at its best on the "
        "pipeline without the map; the micro-steps run in TensorFlow's loop (an iterator "
        "cannot be compiled by XLA), the next micro-batch read while one trains.",
        f"A pipeline that does work, parsing {samples} CSV lines in map (AUTOTUNE): reading "
        f"it alone takes {ms[READ_PARSED]:.0f} ms an epoch; gaviz trains on it in "
        f"{parsed_ms:.0f} ms, Keras at its best (steps_per_execution="
        f"{spe(keras_parsed_best)}) in {keras_parsed_ms:.0f} ms: "
        f"{keras_parsed_ms / parsed_ms:.2f}x.",
        "The first epoch of a fresh model, tracing and compiling included (median of "
        f"{1 if args.quick else 3}, a fresh model each): "
        + "; ".join(f"{name} {seconds:.2f} s" for name, seconds in first.items())
        + f": gaviz's default {gaviz_first / keras_first:.2f}x Keras's default. "
        "jit_compile=\"auto\" runs plain graphs for a trainer's first "
        f"{AUTO_XLA_AFTER_MICRO_STEPS} micro-steps and compiles XLA's whole call only "
        "then, so a short run does not pay the compile (jit_compile=True pays it "
        "at once).",
    ]
    targets_first = []
    if gpt2_first is not None:
        gpt2_gaviz, gpt2_keras = gpt2_first.values()
        notes.append(
            f"The first epoch of a tiny GPT-2 fine-tune (KerasHub's GPT2CausalLM from its "
            f"config: 2 layers, width 64; {len(gpt2_data(args.quick)[1])} sequences of "
            f"{GPT2_LENGTH} tokens), compile included: "
            + "; ".join(f"{name} {seconds:.2f} s" for name, seconds in gpt2_first.items())
            + f" ({gpt2_gaviz / gpt2_keras:.2f}x).")
        targets_first.append(harness.target(
            "gaviz's default / the task's own fit, the first epoch of a tiny GPT-2 "
            "fine-tune (compile included)", gpt2_gaviz / gpt2_keras, 1.0, "x",
            at_least=False))
    else:
        notes.append("The tiny GPT-2's first epoch was not measured: KerasHub is not "
                     "installed (pip install 'gaviz[hub]').")
    result = harness.write_result(
        args.json,
        name="dispatch",
        title="1. Dispatch-bound: a small MLP, one epoch",
        setup=(
            f"MLP {FEATURES}-256-256-1, {samples} samples, micro-batch {MICRO}, k = {K}, SGD; "
            f"time per epoch: median of {rounds} alternating runs of {epochs} epoch(s) each "
            "(one fit call per run), after one warm-up run; each gaviz trainer on arrays first "
            f"trained {AUTO_XLA_AFTER_MICRO_STEPS} micro-steps, past jit_compile=\"auto\"'s "
            "turn for XLA (a short run's first epoch is timed on its own, below)."
        ),
        columns=["trainer", "median epoch (ms)", "time / gaviz"],
        rows=rows,
        targets=[
            harness.target("gaviz's default / the faster compute floor",
                           base / best_floor_ms, 1.2, "x", at_least=False),
            harness.target("gaviz with jit_compile=False / the compute floor",
                           plain_ms / floor_ms, 1.5, "x", at_least=False),
            harness.target("Keras at its best / gaviz's default, on one tf.data pipeline",
                           keras_dataset_ms / dataset_ms, 1.25, "x", at_least=True),
            harness.target("gaviz on the tf.data pipeline / gaviz on the same arrays",
                           dataset_ms / base, 1.5, "x", at_least=False),
            harness.target("Keras at its best / gaviz's default, on a pipeline parsing CSV "
                           "lines", keras_parsed_ms / parsed_ms, 1.0, "x", at_least=True),
            harness.target("gaviz's default / Keras's default, the first epoch of a fresh "
                           "model (compile included)", gaviz_first / keras_first, 1.0, "x",
                           at_least=False),
            *targets_first,
        ],
        notes=notes,
        first_epoch_seconds=first,
        gpt2_first_epoch_seconds=gpt2_first,
        floors_ms={"plain": floor_ms, "xla": floor_xla_ms},
        plot={"labels": SHORT_LABELS, "ms": [r[1] for r in rows]},
    )
    for row in result["rows"]:
        print(f"{row[0]:<80} {row[1]:8.1f} ms {row[2]:6.2f}x")
    for name, seconds in first.items():
        print(f"first epoch: {name:<60} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
