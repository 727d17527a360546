"""What ``trainer.verify`` costs beside the run it checks, on six kinds of model.

    python benchmarks/verify_cost.py            # a markdown table on stdout

Not part of ``make bench``: it backs the table of docs/guide/benchmarks.md
("What verify costs"). Each model runs in a fresh process: ``verify`` at its
default scaled micro-batch (seconds, compiles included, and how much
TensorFlow's CPU allocator peak grows), then one epoch of the run it checks
(``fit`` at the real micro-batch, a fresh trainer, compiles included), the
same two numbers. The verdict and its causes come from ``verify`` itself.
Tiny KerasHub backbones built from config (no preset is downloaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# Before TensorFlow starts: oneDNN's CPU allocator keeps the statistics read here.
os.environ.update({"TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})

MODELS = ("MLP", "CNN with BatchNorm", "BERT classifier + preprocessor", "GPT-2 causal LM",
          "ViT classifier + preprocessor", "own loop with the Accumulator")
WORDS = "the quick brown fox jumps over lazy dog a cat sat on mat and ran far away".split()


def mlp(np, keras):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8192, 64)).astype("float32")
    y = rng.normal(size=(8192, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), loss="mse")
    return model, dict(x=x, y=y, batch_size=32), 8


def cnn(np, keras):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, 1024)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((28, 28, 1)), keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model, dict(x=x, y=y, batch_size=32), 4


def bert(np, keras):
    import keras_hub
    rng = np.random.default_rng(0)
    text = np.array([" ".join(rng.choice(WORDS, rng.integers(2, 9))) for _ in range(256)])
    keras.utils.set_random_seed(0)
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary), num_layers=2, num_heads=2, hidden_dim=32,
        intermediate_dim=64, max_sequence_length=16, dropout=0.0)
    task = keras_hub.models.BertTextClassifier(
        backbone, num_classes=3, dropout=0.0,
        preprocessor=keras_hub.models.BertTextClassifierPreprocessor(tokenizer,
                                                                     sequence_length=16))
    task.compile(optimizer=keras.optimizers.SGD(0.1),
                 loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                 metrics=["accuracy"])
    return task, dict(x=text, y=rng.integers(0, 3, 256), batch_size=8), 4


def gpt2(np, keras):
    import keras_hub
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far"]
    text = np.array([" ".join(rng.choice(words, rng.integers(1, 6))) for _ in range(256)])
    keras.utils.set_random_seed(0)
    vocabulary = {"<|endoftext|>": 0, "\u0120": 1}
    for letter in "abcdefghijklmnopqrstuvwxyz":
        vocabulary[letter] = len(vocabulary)
        vocabulary["\u0120" + letter] = len(vocabulary)
    for token in ("he", "\u0120the"):
        vocabulary[token] = len(vocabulary)
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary,
                                               merges=["\u0120 t", "h e", "\u0120t he"])
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(vocabulary), num_layers=2, num_heads=2, hidden_dim=32,
        intermediate_dim=64, max_sequence_length=16, dropout=0.0)
    task = keras_hub.models.GPT2CausalLM(
        backbone, preprocessor=keras_hub.models.GPT2CausalLMPreprocessor(tokenizer,
                                                                         sequence_length=16))
    task.compile(optimizer=keras.optimizers.Adam(1e-3))
    return task, dict(x=text, batch_size=8), 4


def vit(np, keras):
    import keras_hub
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, size=(128, 16, 16, 3)).astype("float32")
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2, hidden_dim=16,
        mlp_dim=32, dropout_rate=0.0, attention_dropout=0.0)
    converter = keras_hub.layers.ViTImageConverter(image_size=(16, 16), scale=1 / 255.0)
    task = keras_hub.models.ViTImageClassifier(
        backbone, num_classes=3, dropout=0.0,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter))
    task.compile(optimizer=keras.optimizers.SGD(0.1),
                 loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return task, dict(x=images, y=rng.integers(0, 3, 128), batch_size=8), 4


def measure(name):
    """One model in this process: verify's and the run's seconds and peak growth."""
    import keras
    import numpy as np
    import tensorflow as tf

    import gaviz
    build = dict(zip(MODELS, (mlp, cnn, bert, gpt2, vit, mlp)))[name]

    def run(work):
        began = time.perf_counter()
        result, memory = gaviz.measure_peak_memory(work, device="CPU:0")
        return result, time.perf_counter() - began, memory.growth_bytes

    model, data, k = build(np, keras)
    if name.startswith("own loop"):
        work, check = own_loop(model, data, k, keras, tf, gaviz)
    else:
        trainer = gaviz.AccumulationTrainer(model, accumulation_steps=k)
        weights = [w.copy() for w in model.get_weights()]

        def check():
            return trainer.verify(data["x"], data.get("y"), batch_size=data["batch_size"])

        def work():
            model.set_weights(weights)
            gaviz.AccumulationTrainer(model, accumulation_steps=k).fit(
                **data, epochs=1, shuffle=False, verbose=0)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, verify_seconds, verify_bytes = run(check)
        _, run_seconds, run_bytes = run(work)
    return {"model": name, "k": k, "b": data["batch_size"], "equal": result.equal,
            "kind": result.kind,
            "causes": [c.name for c in result.causes], "verify_s": verify_seconds,
            "verify_mib": verify_bytes / 2**20, "run_s": run_seconds, "run_mib": run_bytes / 2**20,
            "micro": result.micro_batch_size, "rows": result.rows}


def own_loop(model, data, k, keras, tf, gaviz):
    optimizer, loss_fn = model.optimizer, keras.losses.MeanSquaredError()

    def train_epoch(micro_batches, accumulation_steps):
        acc = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            acc.step(tape.gradient(loss, model.trainable_variables), count=tf.shape(x)[0])

        for x, y in micro_batches:
            step(x, y)
        acc.flush()

    def check():
        return gaviz.verify_loop(train_epoch, model, data["x"], data["y"], accumulation_steps=k,
                                 batch_size=data["batch_size"])

    def work():
        train_epoch(tf.data.Dataset.from_tensor_slices((data["x"], data["y"])).batch(
            data["batch_size"]), k)

    return work, check


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(sys.argv[2])))
        return
    rows = []
    for name in MODELS:
        done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True,
                              text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| model | k, micro-batch (verified at) | verdict | verify: s, peak growth MiB "
          "| one epoch of the run: s, peak growth MiB |")
    print("| --- | --- | --- | ---: | ---: |")
    for r in rows:
        verdict = r["kind"] if r["equal"] else f"{r['kind']}: " + ", ".join(r["causes"])
        print(f"| {r['model']} | {r['k']}, {r['b']} ({r['micro']}, {r['rows']} rows) | {verdict} "
              f"| {r['verify_s']:.1f}, {r['verify_mib']:.1f} | {r['run_s']:.1f}, "
              f"{r['run_mib']:.1f} |")


if __name__ == "__main__":
    main()
