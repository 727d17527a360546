"""Runs in its own process (two logical CPU devices, set before TensorFlow
starts): an Embedding's sparse gradients under MirroredStrategy, gaviz's
trainer and Accumulator against Model.fit at the big batch under the same
strategy, whose optimizer all-reduces each replica's slices side by side.

Prints one JSON object with what tests/training/test_distributed.py checks.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import weights_record  # noqa: E402

import gaviz  # noqa: E402

K, B, ROWS, LENGTH, VOCAB = 3, 8, 92, 6, 30  # global micro-batches of 8; a ragged last window
OPTIMIZERS = {"Adam": lambda: keras.optimizers.Adam(0.05),
              "Adagrad": lambda: keras.optimizers.Adagrad(0.2),
              "AdamW": lambda: keras.optimizers.AdamW(0.05, weight_decay=0.1)}


def make_model(optimizer):
    keras.utils.set_random_seed(4)
    model = keras.Sequential([
        keras.Input((LENGTH,), dtype="int32"), keras.layers.Embedding(VOCAB, 4, name="tokens"),
        keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile(optimizer, "mse")
    return model


def data():
    rng = np.random.default_rng(5)
    tokens = np.minimum(rng.geometric(0.3, size=(ROWS, LENGTH)), VOCAB - 1).astype("int32")
    return tokens, rng.normal(size=(ROWS, 1)).astype("float32")


def keras_fit(strategy, name, x, y):
    with strategy.scope():
        model = make_model(OPTIMIZERS[name]())
    model.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    return model


def trainer_case(strategy, name, x, y):
    with strategy.scope():
        model = make_model(OPTIMIZERS[name]())
    start = model.get_weights()
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K, strategy=strategy)
    history = trainer.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    expected = keras_fit(strategy, name, x, y)
    return {"weights": weights_record(model, expected, start),
            "sparse": sorted(trainer.window_loop.sparse),
            "loss": history.history["loss"],
            "expected_loss": keras_fit_history(strategy, name, x, y)}


def keras_fit_history(strategy, name, x, y):
    with strategy.scope():
        model = make_model(OPTIMIZERS[name]())
    return model.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0).history["loss"]


def accumulator_case(strategy, x, y):
    """An own loop: strategy.run of a micro-step that steps the Accumulator with
    this replica's tape gradients and count, then a flush each epoch."""
    with strategy.scope():
        model = make_model(OPTIMIZERS["Adam"]())
        acc = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
        loss = keras.losses.MeanSquaredError()  # divides by the replicas itself
    start = model.get_weights()

    @tf.function
    def micro_step(xb, yb):
        def replica(xb, yb):
            with tf.GradientTape() as tape:
                value = loss(yb, model(xb, training=True))
            acc.step(tape.gradient(value, model.trainable_variables), count=tf.shape(xb)[0])
        strategy.run(replica, args=(xb, yb))

    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(B))
    for _ in range(2):
        for xb, yb in dataset:
            micro_step(xb, yb)
        acc.flush()
    expected = keras_fit(strategy, "Adam", x, y)
    return {"weights": weights_record(model, expected, start), "sparse": sorted(acc.window.sparse),
            "iterations": int(model.optimizer.iterations.numpy())}


def main():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x, y = data()
    result = {"replicas": strategy.num_replicas_in_sync,
              "trainer": {name: trainer_case(strategy, name, x, y) for name in OPTIMIZERS},
              "accumulator": accumulator_case(strategy, x, y)}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
