"""6. Sparse gradients: an Embedding's window, its memory and its time.

A window keeps an Embedding's sparse gradient as its occurrences (each
micro-batch's rows, ``gaviz.training.window.occurrences``), so that the
optimizer gets the big batch's own slices, as ``Model.fit`` hands them. The
window gaviz made before (the "dense window") added every micro-batch's rows
into a dense copy of the table instead: one table's bytes whatever k, but
another update than Model.fit's for every optimizer not linear in the
gradient. Here it is rebuilt by telling the trainer that no gradient is
sparse (:func:`dense_window`), as gaviz found none before.

Memory: a large table (30,000 x 256, 29.3 MiB), micro-batches of 8 rows x 128
tokens (1,024 occurrences, 1 MiB of rows), Adam; the peak of TensorFlow's
allocator during an epoch after a warm-up one, above what was in use before
it, each configuration in three fresh processes, in turns (as bench_memory.py): gaviz's
occurrences and the dense window at k = 2, 8 and 32, and Model.fit at the big
batch (8k rows). The occurrences grow with k x the tokens of a micro-batch
(at k = 32, 32,768 rows: more than the table's 30,000); the dense window is
one table; Model.fit's big batch holds the same occurrences and k times a
micro-batch's activations.

Time: one epoch of a pooled-Embedding model and of a small KerasHub BERT
classifier with its preprocessor (built from config, on raw strings),
AdamW, micro-batch 8 x k = 4, gaviz with occurrences against the dense
window and Model.fit at the big batch, in turns (benchmarks/harness.py).

    python benchmarks/bench_sparse.py [--rounds 5] [--quick] [--json PATH]
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

import gaviz

VOCABULARY, WIDTH, TOKENS, MICRO = 30_000, 256, 128, 8
MEMORY_K = (2, 8, 32)
TIME_K = 4


def dense_window(trainer):
    """``trainer`` with the window gaviz made before it kept occurrences: the
    micro-step's search for sparse gradients finds none, so each is summed into a
    dense table (and said so, with a SparseGradientWarning, silenced here)."""
    trainer.window_loop.forward_backward.sparse = lambda element, strategy: frozenset()
    warnings.simplefilter("ignore", gaviz.SparseGradientWarning)
    return trainer


# ------------------------------------------------------------------ memory

def table_model(vocabulary=VOCABULARY):
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((TOKENS,), dtype="int32"),
        keras.layers.Embedding(vocabulary, WIDTH),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(1),
    ])


def tokens(rows, vocabulary=VOCABULARY, seed=0):
    """Zipf-like token ids (a few frequent, most rare), as text gives."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.3, size=(rows, TOKENS)) - 1, vocabulary - 1).astype("int32")
    return ids, rng.normal(size=(rows, 1)).astype("float32")


def memory_epoch(configuration: str, k: int, rows: int, vocabulary: int):
    """One epoch of ``configuration`` (occurrences, dense, keras) at ``k``."""
    model = table_model(vocabulary)
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    x, y = tokens(rows, vocabulary)
    if configuration == "keras":
        return lambda: model.fit(x, y, batch_size=MICRO * k, shuffle=False, verbose=0), model
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=k, jit_compile=False)
    if configuration == "dense":
        dense_window(trainer)
    return lambda: trainer.fit(x, y, batch_size=MICRO, shuffle=False, verbose=0), model


def measure(configuration, k, rows, vocabulary):
    """In a fresh process: one configuration's peak growth during an epoch."""
    epoch, model = memory_epoch(configuration, k, rows, vocabulary)
    epoch()  # warm-up: tracing, optimizer slots, first-call allocations
    gc.collect()
    _, report = gaviz.measure_peak_memory(epoch, device="CPU:0")
    return {"growth_bytes": report.growth_bytes,
            "table_bytes": int(np.prod(model.layers[0].embeddings.shape)) * 4}


def in_child(configuration, k, quick):
    command = [sys.executable, __file__, "--child", configuration, str(k)] + (
        ["--quick"] if quick else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"Measuring {configuration} at k={k} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


MEMORY_NAMES = {"occurrences": "gaviz, occurrences (now)", "dense": "gaviz, dense window (before)",
                "keras": "Model.fit at the big batch"}


# -------------------------------------------------------------------- time

def pooled_model():
    model = table_model()
    model.compile(keras.optimizers.AdamW(1e-3), "mse")
    return model


def bert_classifier():
    """A small BERT classifier and its preprocessor, built from config."""
    import keras_hub

    keras.utils.set_random_seed(0)
    words = [f"w{i}" for i in range(2000)]
    tokenizer = keras_hub.models.BertTokenizer(
        vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words], lowercase=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=64)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(words) + 5, num_layers=2, num_heads=2, hidden_dim=64,
        intermediate_dim=128, max_sequence_length=64, dropout=0.0)
    task = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=preprocessor,
                                               dropout=0.0)
    task.compile(optimizer=keras.optimizers.AdamW(1e-3),
                 loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return task


def sentences(rows, seed=0):
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.3, size=(rows, 40)) - 1, 1999)
    return np.array([" ".join(f"w{r}" for r in row) for row in ranks]), rng.integers(0, 2, rows)


def timed_contestants(make, x, y):
    """gaviz with occurrences, with the dense window, and Model.fit at the big batch."""
    def gaviz_epoch(dense):
        trainer = gaviz.AccumulationTrainer(make(), accumulation_steps=TIME_K)
        if dense:
            dense_window(trainer)
        return lambda: trainer.fit(x, y, batch_size=MICRO, shuffle=False, verbose=0)

    model = make()
    return {"gaviz, occurrences (now)": gaviz_epoch(False),
            "gaviz, dense window (before)": gaviz_epoch(True),
            f"Model.fit, batch {MICRO * TIME_K}": lambda: model.fit(
                x, y, batch_size=MICRO * TIME_K, shuffle=False, verbose=0)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes per memory configuration; the median is reported")
    harness.add_common_arguments(parser, "benchmarks/results/sparse.json")
    args = parser.parse_args(argv)
    vocabulary = 3000 if args.quick else VOCABULARY
    if args.child:
        configuration, k = args.child[0], int(args.child[1])
        rows = 2 * MICRO * max(MEMORY_K)
        print(json.dumps(measure(configuration, k, rows, vocabulary)))
        return

    processes = 1 if args.quick else args.processes
    runs = {}
    for _ in range(processes):  # in turns, as bench_memory.py
        for k in MEMORY_K:
            for c in MEMORY_NAMES:
                runs.setdefault((c, k), []).append(in_child(c, k, args.quick))
    table_mib = runs[("keras", 2)][0]["table_bytes"] / 2**20
    mib = {key: statistics.median(m["growth_bytes"] for m in measured) / 2**20
           for key, measured in runs.items()}

    rounds, rows = (1, 64) if args.quick else (args.rounds, 512)
    times = {}
    x, y = tokens(rows)
    for name, seconds in harness.alternate(timed_contestants(pooled_model, x, y), rounds).items():
        times["pooled Embedding: " + name] = seconds
    text, labels = sentences(rows // 2)
    for name, seconds in harness.alternate(timed_contestants(bert_classifier, text, labels),
                                           rounds).items():
        times["BERT with its preprocessor: " + name] = seconds
    ms = {name: harness.median_ms(seconds) for name, seconds in times.items()}

    def ratio(model):
        return ms[f"{model}: gaviz, occurrences (now)"] / ms[f"{model}: gaviz, dense window (before)"]

    rows_out = [[f"peak growth (MiB) at k = {k}: {MEMORY_NAMES[c]}", mib[(c, k)],
                 mib[(c, k)] / table_mib] for k in MEMORY_K for c in MEMORY_NAMES]
    rows_out += [[f"median epoch (ms), {name}", value, None] for name, value in ms.items()]
    result = harness.write_result(
        args.json,
        name="sparse",
        title="6. Sparse gradients: an Embedding's window",
        setup=(
            f"Memory: Embedding({vocabulary:,}, {WIDTH}) pooled into Dense(1), micro-batches of "
            f"{MICRO} rows x {TOKENS} tokens (Zipf-like ids), Adam, {2 * MICRO * max(MEMORY_K)} "
            "rows; peak of TensorFlow's allocator during an epoch after a warm-up one, above "
            f"what was in use before, median of {processes} fresh process(es) per "
            "configuration. Time: AdamW, "
            f"micro-batch {MICRO} x k = {TIME_K}, {rows} rows of {TOKENS} tokens for the pooled "
            f"model and {rows // 2} sentences for BERT (2 layers, hidden 64, a vocabulary of "
            f"2,005, sequences of 64); median of {rounds} alternating epochs after one warm-up."
        ),
        columns=["what", "MiB or ms", "growth / the table's bytes"],
        rows=[[name, value, "" if share is None else share] for name, value, share in rows_out],
        targets=[
            harness.target(f"occurrences' peak / Model.fit's at the big batch, k = {k}",
                           mib[("occurrences", k)] / mib[("keras", k)], 1.0, "x", at_least=False)
            for k in MEMORY_K if k < max(MEMORY_K)
        ] + [
            harness.target(f"{model}: an epoch with occurrences / with the dense window",
                           ratio(model), 1.1, "x", at_least=False)
            for model in ("pooled Embedding", "BERT with its preprocessor")
        ],
        notes=[
            f"The table: {table_mib:.1f} MiB. A micro-batch's occurrences: "
            f"{MICRO * TOKENS:,} rows, {MICRO * TOKENS * WIDTH * 4 / 2**20:.1f} MiB; a window "
            "holds k of them (and their indices), so at k = 32 more rows than the table has: "
            "gaviz keeps them (Model.fit's update needs each). Model.fit's big batch holds "
            "the same rows, and the optimizer's work on them (Adam squares each) is the "
            "same: at k = 32, where the rows outweigh this model's activations, the two "
            f"peaks are {mib[('occurrences', 32)] / mib[('keras', 32)]:.2f}x apart; with "
            "fewer rows gaviz undercuts Model.fit by the activations it does not hold.",
            "All memory runs (MiB): " + "; ".join(
                f"{MEMORY_NAMES[c]} at k = {k}: " + ", ".join(
                    f"{m['growth_bytes'] / 2**20:.1f}" for m in measured)
                for (c, k), measured in runs.items()) + ".",
        ],
        plot={"k": list(MEMORY_K),
              "mib": {c: [mib[(c, k)] for k in MEMORY_K] for c in MEMORY_NAMES},
              "labels": {c: MEMORY_NAMES[c] for c in MEMORY_NAMES},
              "table_mib": table_mib},
    )
    for row in result["rows"]:
        print(f"{row[0]:<72} {row[1]:9.1f} {row[2] if row[2] == '' else f'{row[2]:.2f}'}")


if __name__ == "__main__":
    main()
