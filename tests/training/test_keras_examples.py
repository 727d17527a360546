"""Patterns of Keras's own examples (keras.io), trained by the trainer as
``Model.fit(batch_size=K * B, shuffle=False)`` trains them: the same weights
and the same ``history.history``."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_history, assert_same_weights, start_of

import gaviz

B, K = 4, 2  # micro-batch size and accumulation steps: Keras's batch is K * B = 8


def twins(make):
    """The model ``make()`` builds, twice, with the same weights and optimizer."""
    model, reference = make(), make()
    reference.set_weights(model.get_weights())
    return model, reference


def text_classifier():
    """Strings in, through a TextVectorization layer (keras.io's text classification)."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([
        keras.Input((), dtype="string"),
        keras.layers.TextVectorization(vocabulary=["a", "b", "c"], output_mode="multi_hot"),
        keras.layers.Dense(1),
    ])
    model.compile(keras.optimizers.Adam(0.05), loss="mse")
    return model


def test_strings_in_a_1d_object_array_train_and_validate_as_model_fit():
    """Model.fit takes strings as a 1-D object array of str (not as numpy str_)."""
    x = np.array(["a b", "c", "a c", "b b", "c c a", "b"] * 3, dtype=object)  # 18 rows: ragged
    y = np.linspace(-1, 1, 18, dtype="float32").reshape(18, 1)
    model, reference = twins(text_classifier)
    start = start_of(model)
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verbose=0, validation_data=(x, y))
    theirs = reference.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0,
                           validation_data=(x, y))
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=K * B)


class LogisticEndpoint(keras.layers.Layer):
    """keras.io's endpoint layer: the loss and a metric computed in call, from
    targets and sample weights given as inputs (keras_recipes/endpoint_layer_pattern)."""

    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_fn = keras.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            self.add_loss(self.loss_fn(targets, logits, sample_weight))
            self.accuracy_fn.update_state(targets, logits, sample_weight)
        return keras.ops.sigmoid(logits)


def endpoint_model():
    """Compiled without a loss: its only loss is the endpoint's add_loss."""
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,), name="inputs")
    targets = keras.Input((1,), name="targets")
    sample_weight = keras.Input((1,), name="sample_weight")
    logits = keras.layers.Dense(1)(inputs)
    predictions = LogisticEndpoint()(logits, targets, sample_weight)
    model = keras.Model([inputs, targets, sample_weight], predictions)
    model.compile(keras.optimizers.Adam(0.05))
    return model


def endpoint_data(rows, seed=0):
    """Inputs alone, targets and weights among them: fit(data), y=None."""
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(rows, 5)).astype("float32")
    return {"inputs": inputs,
            "targets": (inputs[:, :1] + 0.5 * rng.normal(size=(rows, 1)) > 0).astype("float32"),
            "sample_weight": rng.uniform(0.5, 1.5, size=(rows, 1)).astype("float32")}


@pytest.mark.parametrize("form", ["arrays", "dataset"])
def test_a_loss_added_by_an_endpoint_layer_trains_as_model_fit(form):
    data, validation = endpoint_data(20), endpoint_data(6, seed=1)  # windows of 8, 8 and 4
    model, reference = twins(endpoint_model)
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    x = data if form == "arrays" else tf.data.Dataset.from_tensor_slices(data).batch(B)
    ours = trainer.fit(x, batch_size=B if form == "arrays" else None, epochs=2,
                       shuffle=False, verbose=0, validation_data=validation)
    theirs = reference.fit(data, batch_size=K * B, epochs=2, shuffle=False, verbose=0,
                           validation_data=validation)
    assert sorted(theirs.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=K * B)


PARTIAL_CACHE = "The calling iterator did not fully read the dataset being cached"

CACHED_FIT = """
import keras, numpy as np, tensorflow as tf, gaviz
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(0.1), loss="mse")
x, y = np.ones((20, 3), "float32"), np.ones((20, 1), "float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).cache().prefetch(1)
gaviz.AccumulationTrainer(model, accumulation_steps=2).fit(dataset, epochs=2, verbose=0)
print("updates", int(model.optimizer.iterations.numpy()), flush=True)
next(iter(tf.data.Dataset.range(4).cache().take(1)))  # logs the warning once, as a control
"""


def test_a_cached_dataset_trains_without_tensorflows_partial_cache_warning():
    """keras.io's input pipelines .cache(): Model.fit reads each pass whole, so
    TensorFlow never logs that a pass left its cache incomplete; the trainer's
    look at the first micro-batch must not either. TensorFlow logs it from C++
    (hidden in this process by TF_CPP_MIN_LOG_LEVEL): a process of its own shows it."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    run = subprocess.run([sys.executable, "-c", CACHED_FIT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "updates 6" in run.stdout  # 5 micro-batches per epoch, k=2: 3 updates
    assert run.stderr.count(PARTIAL_CACHE) == 1, run.stderr  # the control's alone
