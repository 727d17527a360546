"""A model that customises Keras's steps (train_step, compute_loss) is refused by
name, with what to do instead, never silently trained another way."""

import keras
import pytest

import gaviz
from helpers import make_mlp


class OwnTrainStep(keras.Sequential):
    def train_step(self, data):
        return super().train_step(data)


class OwnComputeLoss(keras.Sequential):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return super().compute_loss(x, y, y_pred, sample_weight, training) + 0.1


class Layered(OwnComputeLoss):  # an override inherited from a user class counts too
    pass


def layers():
    return [keras.Input((5,)), keras.layers.Dense(4), keras.layers.Dense(1)]


@pytest.mark.parametrize("cls, method, owner", [
    (OwnTrainStep, "train_step", "OwnTrainStep"),
    (OwnComputeLoss, "compute_loss", "OwnComputeLoss"),
    (Layered, "compute_loss", "OwnComputeLoss"),
])
def test_an_overridden_step_is_refused_by_name(cls, method, owner):
    model = cls(layers())
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with pytest.raises(ValueError, match=rf"overrides {method} \({owner}\.{method}\)") as caught:
        gaviz.AccumulationTrainer(model, accumulation_steps=2)
    assert "Model.fit" in str(caught.value)  # and what to do instead


def test_keras_own_models_are_accepted():
    gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2)
    inputs = keras.Input((5,))
    functional = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    gaviz.AccumulationTrainer(functional, keras.optimizers.SGD(0.1), "mse", 2)
