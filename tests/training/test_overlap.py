"""Two micro-steps in flight (gaviz.training.loop.overlap): where they are allowed,
and that they change no number: the weights are those of one micro-step at a time."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import PIPELINES, make_mlp
from reference import dataset_of, micro_batches

import gaviz
from gaviz.training.fit import compiling
from gaviz.training.loop import overlap
from gaviz.training.window import rules


def in_flight(model, rows=32, exact_steps=True, replicas=1):
    return overlap.micro_steps_in_flight(model, rows, compiling.weight_bytes(model),
                                         exact_steps, replicas)


def sequential(*layers, inputs=5):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((inputs,)), *layers, keras.layers.Dense(1)])


def test_two_overlap_only_where_a_second_micro_step_holds_little_and_changes_nothing():
    assert in_flight(make_mlp()) == 2
    assert in_flight(make_mlp(), exact_steps=False) == 1  # a rule or hook acting per micro-step
    assert in_flight(make_mlp(), replicas=2) == 1
    # Something in the forward pass changes state: batch statistics, dropout's seed.
    assert in_flight(sequential(keras.layers.BatchNormalization())) == 1
    assert in_flight(sequential(keras.layers.Dropout(0.1))) == 1
    # Too many bytes: the weights (a second micro-step's gradients), or the activations.
    assert in_flight(sequential(keras.layers.Dense(1100), inputs=1000)) == 1
    wide = sequential(keras.layers.Dense(256), inputs=8)
    assert in_flight(wide, rows=32) == 2 and in_flight(wide, rows=2048) == 1

    class Subclassed(keras.Model):  # its layers' outputs are not known
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    model = Subclassed()
    model(np.zeros((1, 5), np.float32))
    assert in_flight(model) == 1


def test_the_trainer_decides_once_on_the_first_micro_batch(regression_data):
    x, y = regression_data
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 4)
    assert trainer.micro_steps_in_flight is None
    trainer.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert trainer.micro_steps_in_flight == trainer.window_loop.micro_steps_in_flight == 2
    traced = trainer.tracing_count
    trainer.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert trainer.tracing_count == traced  # decided once: the loop is not built again

    class EachMicroBatch(gaviz.AccumulationTrainer):
        rule = rules.Rule(apply_each_micro_batch=True)

    pitfall = EachMicroBatch(make_mlp(), keras.optimizers.SGD(0.1), "mse", 4)
    pitfall.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert pitfall.micro_steps_in_flight == pitfall.window_loop.micro_steps_in_flight == 1


def ragged(x, y):
    return dataset_of(micro_batches(x, y, [3, 17, 5, 9, 1, 20, 13, 2, 30]))


@pytest.mark.parametrize("data", ["arrays", "iterated", "ragged"])
def test_two_in_flight_give_the_weights_of_one_at_a_time(regression_data, data):
    """Bit for bit: the sums are added in the data's order either way (a
    dataset's reads wait for each other, and each addition for the last)."""
    x, y = regression_data
    weights = []
    for count in (1, 2):
        trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.Adam(0.01), "mse", 3,
                                            jit_compile=False, metrics=["mae"])
        trainer.micro_steps_in_flight = count
        if data == "arrays":
            history = trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        else:
            dataset = ragged(x, y) if data == "ragged" else PIPELINES["iterated"](
                tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
            history = trainer.fit(dataset, epochs=2, verbose=0)
        weights.append((trainer.model.get_weights(), history.history))
    (one, one_history), (two, two_history) = weights
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert one_history == two_history
