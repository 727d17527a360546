"""A model that customises Keras's steps: its own compute_loss is honoured (equal
to Model.fit) when it is a mean over the batch's rows, and refused by name when
it is not; an overridden train_step is refused by name, with what to do instead.
Never silently trained another way."""

import inspect

import keras
import numpy as np
import pytest
from helpers import assert_same_history, make_mlp, weight_gap
from keras import ops

import gaviz

B, K, ROWS = 8, 4, 100  # Keras's batch: 32; a partial last window


class OwnTrainStep(keras.Sequential):
    def train_step(self, data):
        return super().train_step(data)


class OwnComputeLoss(keras.Sequential):
    """Keras's loss (weight penalties included) plus a per-row output penalty."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training)
        return loss + 0.5 * ops.mean(ops.square(y_pred))


class Layered(OwnComputeLoss):  # an override inherited from a user class counts too
    pass


class WithoutTraining(keras.Sequential):
    """compute_loss as Keras before 3.3 called it: no ``training`` argument."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        return ops.mean(ops.abs(y - y_pred)) + ops.sum(self.losses)


class SummedOverRows(keras.Sequential):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return ops.sum(ops.square(y - y_pred))


class WorstRow(keras.Sequential):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return ops.max(ops.square(y - y_pred))


def layers():
    return [keras.Input((5,)),
            keras.layers.Dense(4, activation="tanh",
                               kernel_regularizer=keras.regularizers.L2(0.01)),
            keras.layers.Dense(1)]


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 5)).astype("float32")
    return x, (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")


def pair(cls):
    """A compiled model of ``cls``, its trainer, and an identical clone for Model.fit."""
    keras.utils.set_random_seed(1)
    model = cls(layers())
    reference = cls(layers())  # its own class: clone_model would give a plain Sequential
    reference.set_weights(model.get_weights())
    for m in (model, reference):
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model, gaviz.AccumulationTrainer(model, accumulation_steps=K), reference


@pytest.mark.parametrize("cls", [OwnComputeLoss, Layered, WithoutTraining])
def test_an_own_compute_loss_equals_model_fit(cls):
    x, y = data()
    model, trainer, reference = pair(cls)
    ours = trainer.fit(x, y, batch_size=B, epochs=3, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, batch_size=K * B, epochs=3, shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    assert weight_gap(model, reference) < 1e-5
    assert trainer.normalize == "samples"


@pytest.mark.parametrize("cls", [SummedOverRows, WorstRow])
def test_a_compute_loss_that_is_not_a_mean_over_rows_is_refused_by_name(cls):
    x, y = data()
    _, trainer, _ = pair(cls)
    with pytest.raises(ValueError, match=rf"overrides compute_loss \({cls.__name__}\."
                                         r"compute_loss\) with a loss that is not a mean "
                                         r"over the batch's rows") as caught:
        trainer.fit(x, y, batch_size=B, epochs=1, verbose=0)
    assert "Model.fit" in str(caught.value)  # and what to do instead


def test_an_overridden_train_step_is_refused_by_name():
    model = OwnTrainStep(layers())
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with pytest.raises(ValueError, match=r"overrides train_step \(OwnTrainStep\.train_step\)"
                       ) as caught:
        gaviz.AccumulationTrainer(model, accumulation_steps=2)
    message = " ".join(str(caught.value).split())
    # What to do instead: keep the train_step, accumulate in it with gaviz.Accumulator.
    for step in ("`self.accumulator = gaviz.Accumulator(self.optimizer, "
                 "self.trainable_variables, accumulation_steps=k)` once the model is built",
                 "`self.accumulator.step(gradients, count)`",
                 "instead of `self.optimizer.apply(...)`",
                 "`model.fit(..., callbacks=[gaviz.FlushAtEpochEnd(self.accumulator)])`",
                 "docs/guide/own_loop.md"):
        assert step in message, message


def test_the_recipe_for_an_own_train_step_calls_what_gaviz_has():
    """The refusal's recipe names public gaviz names with the arguments they take."""
    inspect.signature(gaviz.Accumulator).bind(
        "optimizer", "trainable_variables", accumulation_steps=2)
    inspect.signature(gaviz.Accumulator.step).bind("self", "gradients", "count")
    inspect.signature(gaviz.FlushAtEpochEnd).bind("accumulator")


def test_keras_own_models_are_accepted():
    gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2)
    inputs = keras.Input((5,))
    functional = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    gaviz.AccumulationTrainer(functional, keras.optimizers.SGD(0.1), "mse", 2)


class OwnLossOnly(keras.Sequential):
    """The loss is compute_loss's alone: compiled without one, as Keras allows."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return ops.mean(ops.square(y - y_pred)) + ops.sum(self.losses)


def test_an_own_compute_loss_compiled_without_a_loss_equals_model_fit():
    x, y = data()
    keras.utils.set_random_seed(1)
    model, reference = OwnLossOnly(layers()), OwnLossOnly(layers())
    reference.set_weights(model.get_weights())
    for m in (model, reference):
        m.compile(optimizer=keras.optimizers.Adam(0.01))
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    assert weight_gap(model, reference) < 1e-5
