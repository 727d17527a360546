"""Variables the loss never reaches (an unused layer, an output without a loss):
Model.fit hands its optimizer a None gradient for them, which leaves them out of
the update (Keras's ``_filter_empty_gradients``): not moved by momentum, not
decayed by AdamW. The trainer must do the same, not apply zeros."""

import keras
import numpy as np
import pytest
from helpers import assert_same_history, assert_same_weights

import gaviz

B, K = 4, 3


class WithAnUnusedLayer(keras.Model):
    """A layer built and trainable, but not on the loss path (a head kept for later)."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(4, activation="tanh")
        self.head = keras.layers.Dense(1)
        self.spare = keras.layers.Dense(2)

    def build(self, input_shape):
        self.hidden.build(input_shape)
        self.head.build((None, 4))
        self.spare.build((None, 4))

    def call(self, x):
        return self.head(self.hidden(x))


def unused_layer_model():
    keras.utils.set_random_seed(1)
    model = WithAnUnusedLayer()
    model.build((None, 5))
    return model


def output_without_loss_model():
    """Two outputs, compiled with a loss on the first only."""
    keras.utils.set_random_seed(1)
    x = keras.Input((5,))
    hidden = keras.layers.Dense(4, activation="tanh")(x)
    return keras.Model(x, {"kept": keras.layers.Dense(1)(hidden),
                           "ignored": keras.layers.Dense(1)(hidden)})


@pytest.mark.parametrize("optimizer", [
    lambda: keras.optimizers.AdamW(0.05, weight_decay=0.5),
    lambda: keras.optimizers.SGD(0.05, momentum=0.9),
], ids=["adamw", "sgd-momentum"])
@pytest.mark.parametrize("make", [unused_layer_model, output_without_loss_model],
                         ids=["unused-layer", "output-without-loss"])
def test_a_variable_the_loss_never_reaches_is_left_out_as_in_model_fit(make, optimizer):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(22, 5)).astype("float32")
    y = x[:, :1] - x[:, 1:2]
    if make is output_without_loss_model:
        loss, y = {"kept": "mse", "ignored": None}, {"kept": y, "ignored": y}
    else:
        loss = "mse"
    model, reference = make(), make()
    reference.set_weights(model.get_weights())
    for m in (model, reference):
        m.compile(optimizer=optimizer(), loss=loss)
    before = [w.copy() for w in model.get_weights()]
    with pytest.warns(UserWarning, match="Gradients do not exist for variables"):
        ours = gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(
            x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    with pytest.warns(UserWarning, match="Gradients do not exist for variables"):
        theirs = reference.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, before, terms=K * B)
    unchanged = [np.array_equal(a, b) for a, b in zip(before, model.get_weights())]
    assert unchanged.count(True) == 2  # the unreached kernel and bias, as Model.fit leaves them
