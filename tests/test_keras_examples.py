"""Patterns of Keras's own examples (keras.io), trained by the trainer as
``Model.fit(batch_size=K * B, shuffle=False)`` trains them: the same weights
and the same ``history.history``."""

import keras
import numpy as np

import gaviz
from helpers import assert_same_history, weight_gap

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
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verbose=0, validation_data=(x, y))
    theirs = reference.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0,
                           validation_data=(x, y))
    assert_same_history(ours.history, theirs.history)
    assert weight_gap(model, reference) < 1e-5
