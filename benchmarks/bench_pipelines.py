"""The pipelines people write: gaviz and Keras at its best on the same tf.data object.

MLP 64-256-256-1 (as in 1.), 8192 samples, micro-batch 32, k = 8, SGD, one
epoch. Six pipelines of the same micro-batches, as users write them: one that
only slices arrays (gaviz cuts it as arrays), one that shuffles, one that maps
each row, one that maps each batch, one that caches and shuffles, and one that
reads TFRecord files through ``interleave``. Each is given, as the same
pipeline object, to gaviz's default trainer and to Keras's built-in
``gradient_accumulation_steps`` at each ``steps_per_execution``; reading the
pipeline alone (no model) and the compute floor (the forward and backward
passes alone, from 1.) say what an epoch cannot go below; the same passes fed
by the pipeline (one micro-step at a time, as gaviz runs them, and nothing
else: no window, no update) say what iterating that pipeline costs any loop.
gaviz reads an iterated pipeline with tf.data's autotuner off
(:func:`gaviz.training.data.feeds.without_autotuning`); Keras at
``steps_per_execution=256`` given the pipeline so too is a column of its own.

    python benchmarks/bench_pipelines.py [--rounds 11] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from functools import partial

import harness  # noqa: F401  (quiets TensorFlow before it is imported)
import numpy as np
import report
import tensorflow as tf
from bench_dispatch import (
    FEATURES,
    MICRO,
    K,
    data,
    floor_epoch,
    gaviz_dataset_epoch,
    gaviz_epoch,
    keras_builtin_epoch,
    reading,
)

from gaviz.training.data.feeds import without_autotuning

EPOCHS_PER_RUN = 3
#: Keras's steps_per_execution values tried; "Keras at its best" is the fastest.
KERAS_STEPS_PER_EXECUTION = (8, 64, 256)
#: A pipeline is data-bound when reading it alone takes at least this share
#: of Keras's best epoch on it.
DATA_BOUND = 0.7
AUTOTUNE = tf.data.AUTOTUNE


def jitter(x, y):
    """A cheap per-element transformation (what augmentation or normalisation costs)."""
    return x * 1.5 + 0.25, y


def slices(x, y, _):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)


def shuffled(x, y, _):
    return (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0)
            .batch(MICRO).prefetch(AUTOTUNE))


def per_row_map(x, y, _):
    return (tf.data.Dataset.from_tensor_slices((x, y)).map(jitter, num_parallel_calls=AUTOTUNE)
            .batch(MICRO).prefetch(AUTOTUNE))


def vectorised_map(x, y, _):
    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)
            .map(jitter, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE))


def cached_shuffled(x, y, _):
    return (tf.data.Dataset.from_tensor_slices((x, y)).map(jitter, num_parallel_calls=AUTOTUNE)
            .cache().shuffle(2048, seed=0).batch(MICRO).prefetch(AUTOTUNE))


def write_records(x, y, directory, shards=4):
    """``(x, y)`` as ``shards`` TFRecord files of serialized examples; their paths."""
    paths = []
    for shard, rows in enumerate(np.array_split(np.arange(len(x)), shards)):
        path = os.path.join(directory, f"part-{shard}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in rows:
                features = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i])),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=y[i])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=features))
                writer.write(example.SerializeToString())
        paths.append(path)
    return paths


def from_files(x, y, directory):
    """TFRecord shards read in parallel (interleave), parsed a batch at a time."""
    paths = write_records(x, y, directory)
    spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32),
            "y": tf.io.FixedLenFeature([1], tf.float32)}

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        return parsed["x"], parsed["y"]

    return (tf.data.Dataset.from_tensor_slices(paths)
            .interleave(tf.data.TFRecordDataset, cycle_length=len(paths),
                        num_parallel_calls=AUTOTUNE, deterministic=True)
            .batch(MICRO).map(parse, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE))


#: name -> ``(x, y, directory) -> dataset of micro-batches``.
PIPELINES = {
    "from_tensor_slices(...).batch(32) (cut as arrays)": slices,
    ".shuffle(N, seed=0).batch(32).prefetch": shuffled,
    ".map(f, AUTOTUNE).batch(32).prefetch (per-row map)": per_row_map,
    ".batch(32).map(f, AUTOTUNE).prefetch (vectorised map)": vectorised_map,
    ".map(f).cache().shuffle(2048).batch(32).prefetch": cached_shuffled,
    "TFRecord files, interleave, .batch(32).map(parse)": from_files,
}
#: The figure's series -> the table's column each one plots.
PLOTTED = {"gaviz_ms": "gaviz (ms)", "keras_ms": "Keras at its best (ms)",
           "read_ms": "reading alone (ms)"}
SHORT = ["slices", "shuffle", "per-row map", "vectorised map", "cache + shuffle", "TFRecord files"]


def contestants(x, y, directory):
    runs = {"gaviz on the arrays": gaviz_epoch(x, y), "compute floor": floor_epoch(x, y),
            "the passes alone on the arrays, one at a time": floor_epoch(
                x, y, one_at_a_time=True)}
    for name, make in PIPELINES.items():
        dataset = make(x, y, directory)  # one object, given to every contestant
        same = lambda *_, dataset=dataset: dataset  # noqa: E731
        as_gaviz_reads = without_autotuning(dataset)
        runs[f"{name}: gaviz"] = gaviz_dataset_epoch(x, y, pipeline=same)
        for spe in KERAS_STEPS_PER_EXECUTION:
            runs[f"{name}: Keras, steps_per_execution={spe}"] = keras_builtin_epoch(
                x, y, steps_per_execution=spe, on_dataset=same)
        runs[f"{name}: Keras, without the autotuner"] = keras_builtin_epoch(
            x, y, steps_per_execution=KERAS_STEPS_PER_EXECUTION[-1],
            on_dataset=lambda *_, d=as_gaviz_reads: d)
        runs[f"{name}: reading alone"] = reading(dataset)
        runs[f"{name}: the passes alone, fed by it"] = floor_epoch(
            x, y, one_at_a_time=True, dataset=as_gaviz_reads)
    return runs


def pipeline_targets(short, gaviz_ms, keras_ms, read_ms, arrays_ms, floor_ms, bound):
    """One pipeline's targets: ahead of Keras at its best and within 1.3x of the
    same data as arrays, or, data-bound, within 1.1x of what it cannot go below
    (an epoch cannot be shorter than reading its data, so no data-bound
    pipeline is held to its arrays' time)."""
    if bound:
        return [harness.target(
            f"gaviz / max(reading alone, compute floor), {short} (data-bound)",
            gaviz_ms / max(read_ms, floor_ms), 1.1, "x", at_least=False)]
    targets = [harness.target(f"Keras at its best / gaviz, {short}", keras_ms / gaviz_ms,
                              1.25, "x", at_least=True)]
    if short != "slices":  # cut as arrays: it is the arrays
        targets.append(harness.target(f"gaviz, {short} / gaviz on its arrays",
                                      gaviz_ms / arrays_ms, 1.3, "x", at_least=False))
    return targets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    harness.add_common_arguments(parser, "benchmarks/results/pipelines.json")
    args = parser.parse_args(argv)
    samples, rounds = (1024, 2) if args.quick else (8192, args.rounds)
    epochs = 1 if args.quick else EPOCHS_PER_RUN
    x, y = data(samples)
    with tempfile.TemporaryDirectory() as directory:
        runs = contestants(x, y, directory)
        times = harness.alternate({name: partial(run, epochs) for name, run in runs.items()},
                                  rounds)
    ms = {name: harness.median_ms([t / epochs for t in run_times])
          for name, run_times in times.items()}
    arrays_ms, floor_ms = ms["gaviz on the arrays"], ms["compute floor"]
    one_at_a_time_ms = ms["the passes alone on the arrays, one at a time"]
    rows, targets, speedups = [], [], []
    for (name, _), short in zip(PIPELINES.items(), SHORT):
        keras_times = {spe: ms[f"{name}: Keras, steps_per_execution={spe}"]
                       for spe in KERAS_STEPS_PER_EXECUTION}
        best_spe = min(keras_times, key=keras_times.get)
        gaviz_ms, keras_ms = ms[f"{name}: gaviz"], keras_times[best_spe]
        read_ms, fed_ms = ms[f"{name}: reading alone"], ms[f"{name}: the passes alone, fed by it"]
        bound = read_ms >= DATA_BOUND * keras_ms
        rows.append([name, gaviz_ms, keras_ms, best_spe, keras_ms / gaviz_ms,
                     ms[f"{name}: Keras, without the autotuner"], read_ms, fed_ms,
                     gaviz_ms / fed_ms, gaviz_ms / arrays_ms, "yes" if bound else "no"])
        targets += pipeline_targets(short, gaviz_ms, keras_ms, read_ms, arrays_ms, floor_ms,
                                    bound)
        if not bound:
            speedups.append(keras_ms / gaviz_ms)
    if speedups:
        targets.append(harness.target(
            "Keras at its best / gaviz, pipelines' geometric mean (not data-bound)",
            math.exp(sum(map(math.log, speedups)) / len(speedups)), 1.5, "x", at_least=True))
    notes = [
        f"gaviz on the same data as arrays: {arrays_ms:.0f} ms; the compute floor (the "
        f"forward and backward passes alone, one graph call): {floor_ms:.0f} ms; the same "
        f"passes one micro-step at a time, as gaviz runs them: {one_at_a_time_ms:.0f} ms. A "
        f"pipeline is data-bound where reading it alone takes at least {DATA_BOUND:.0%} of "
        "Keras's best epoch on it.",
        "gaviz reads an iterated pipeline with tf.data's autotuner off "
        "(gaviz.training.data.feeds.without_autotuning), Keras as the pipeline is: the column "
        f"'Keras, without the autotuner' is Keras at steps_per_execution="
        f"{KERAS_STEPS_PER_EXECUTION[-1]} given the pipeline as gaviz reads it, and 'the "
        "passes alone, fed by it' the forward and backward passes, one micro-step at a time, "
        "fed by it so (what iterating the pipeline costs a loop that does nothing else).",
    ]
    columns = ["pipeline", "gaviz (ms)", "Keras at its best (ms)", "its steps_per_execution",
               "Keras / gaviz", "Keras, without the autotuner (ms)", "reading alone (ms)",
               "the passes alone, fed by it (ms)", "gaviz / the passes fed",
               "gaviz / gaviz on arrays", "data-bound"]
    result = harness.write_result(
        args.json,
        name="pipelines",
        title="1c. Pipelines as users write them: the same tf.data object, one epoch",
        setup=(f"MLP {FEATURES}-256-256-1, {samples} samples, micro-batch {MICRO}, k = {K}, "
               f"SGD; medians of {rounds} rotated rounds of {epochs} epochs, per epoch. Keras "
               f"at its best: gradient_accumulation_steps={K} at the fastest "
               f"steps_per_execution of {', '.join(map(str, KERAS_STEPS_PER_EXECUTION))}."),
        columns=columns, rows=rows, targets=targets, notes=notes,
        plot={"labels": SHORT, **{series: [row[columns.index(column)] for row in rows]
                                   for series, column in PLOTTED.items()}},
    )
    print("\n".join(report.table(result["columns"], rows)))
    for line in [report.target_line(t) for t in targets] + notes:
        print("-", line)


if __name__ == "__main__":
    main()
