"""The compiled loss as sums (gaviz.training.loss.objective): what a window is divided by is
known from the losses' reductions as soon as the trainer is made."""

import keras
import pytest
from helpers import make_mlp

import gaviz


@pytest.mark.parametrize("loss, normalize", [
    ("mse", "samples"),
    (keras.losses.MeanSquaredError(), "samples"),
    (keras.losses.MeanSquaredError(reduction="sum"), "sum"),
    (keras.losses.MeanSquaredError(reduction="mean_with_sample_weight"), "weights"),
    (lambda y, p: (y - p) ** 2, "samples"),
])
def test_normalize_is_resolved_before_the_first_fit(loss, normalize):
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), loss, 2)
    assert trainer.normalize == normalize


def test_normalize_follows_the_compiled_losses_of_several_outputs():
    inputs = keras.Input((5,))
    model = keras.Model(inputs, {"a": keras.layers.Dense(1, name="a")(inputs),
                                 "b": keras.layers.Dense(1, name="b")(inputs)})
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss={"a": keras.losses.MeanSquaredError(reduction="sum"),
                        "b": keras.losses.MeanAbsoluteError(reduction="sum")})
    assert gaviz.AccumulationTrainer(model, accumulation_steps=2).normalize == "sum"


def test_a_requested_normalize_that_contradicts_the_loss_is_refused_at_once():
    with pytest.raises(ValueError, match="`normalize`='weights' contradicts"):
        gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1),
                                  keras.losses.MeanSquaredError(reduction="sum"), 2,
                                  normalize="weights")
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2,
                                        normalize="weights")
    assert trainer.normalize == "weights"
