"""Losses a model's layers add with add_loss, next to a compiled per-token loss:
counted as Model.fit counts them (exact at accumulation_steps=1, and over a
window where the added loss is a mean over rows and every micro-batch's loss
divides by the same count per row), found also when added in training only,
and said by name at run time where a window cannot be exact."""

import warnings

import keras
import numpy as np
import pytest
from helpers import assert_same_history, assert_same_weights, start_of
from keras import ops

import gaviz

B, LENGTH, ROWS = 4, 5, 22  # 6 micro-batches, the last of 2 rows


class RowPenalty(keras.layers.Layer):
    """Adds a mean over the batch's rows (0.3 x each row's squared activations)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # passes a mask on unchanged

    def call(self, x):
        self.add_loss(0.3 * ops.mean(ops.sum(ops.square(x), axis=[1, 2])))
        return x


class Router(keras.layers.Layer):
    """A mixture of experts' load-balancing loss (Mixtral's form, coefficient 0.02),
    added in training only: a statistic of the whole batch's tokens."""

    def __init__(self, experts=3, **kwargs):
        super().__init__(**kwargs)
        self.gate = keras.layers.Dense(experts)
        self.experts = experts

    def call(self, x, training=False):
        probabilities = ops.softmax(self.gate(x), axis=-1)
        if training:
            chosen = ops.one_hot(ops.argmax(probabilities, axis=-1), self.experts)
            share = ops.mean(ops.reshape(chosen, (-1, self.experts)), axis=0)
            weight = ops.mean(ops.reshape(probabilities, (-1, self.experts)), axis=0)
            self.add_loss(0.02 * self.experts * ops.sum(share * weight))
        return x * ops.sum(probabilities, axis=-1, keepdims=True)


def sequence_model(adds, seed=2):
    """Per-token regression over sequences of LENGTH steps, with layer ``adds``."""
    keras.utils.set_random_seed(seed)
    x = keras.Input((LENGTH, 3))
    hidden = keras.layers.Dense(4, activation="tanh")(x)
    hidden = adds()(hidden)
    model = keras.Model(x, keras.layers.Dense(1)(hidden))
    model.compile(keras.optimizers.Adam(0.02), loss="mse")
    return model


def data(rows=ROWS, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, LENGTH, 3)).astype("float32")
    return x, (x[..., :1] * 0.5 - x[..., 1:2]).astype("float32")


def fit_both(adds, k):
    """The trainer at micro-batch B and accumulation_steps k against Model.fit at k * B."""
    x, y = data()
    model, reference = sequence_model(adds), sequence_model(adds)
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=k)
    ours = trainer.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, batch_size=k * B, epochs=2, shuffle=False, verbose=0)
    return model, reference, ours, theirs, start


@pytest.mark.parametrize("k", [1, 3])
def test_a_mean_over_rows_next_to_a_per_token_loss_equals_model_fit(k):
    """The per-token loss divides by rows x LENGTH; the added loss was weighed by
    rows, so it counted 1/LENGTH of Model.fit's, even at k = 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", gaviz.InexactAddedLoss)  # exact: nothing to say
        model, reference, ours, theirs, start = fit_both(RowPenalty, k)
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=k * B * LENGTH)


def test_a_router_loss_added_in_training_only_equals_model_fit_at_k_1():
    with warnings.catch_warnings():
        warnings.simplefilter("error", gaviz.InexactAddedLoss)  # one micro-batch a window
        model, reference, ours, theirs, start = fit_both(lambda: Router(name="router"), 1)
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=B * LENGTH)


def test_a_router_loss_is_said_to_be_inexact_over_a_window_by_name():
    """The balance of a batch is not the mean of its micro-batches' balances:
    said at the first fit, naming the layer and that it is added in training only
    (a look with training=False found none)."""
    with pytest.warns(gaviz.InexactAddedLoss,
                      match=r"added with add_loss by router \(added in training only\) is "
                            r"not a mean over the batch's rows.*router's balance") as said:
        fit_both(lambda: Router(name="router"), 3)
    assert len([w for w in said if w.category is gaviz.InexactAddedLoss]) == 1
    assert said[0].filename == __file__


def test_a_mean_over_rows_next_to_a_masked_loss_is_said_to_be_inexact_over_a_window():
    """A masked token loss divides each micro-batch by its real tokens, which vary
    per row: the added loss cannot share the window's one divisor."""
    keras.utils.set_random_seed(5)
    tokens = keras.Input((LENGTH,), dtype="int32")
    hidden = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    model = keras.Model(tokens, keras.layers.Dense(3)(RowPenalty(name="penalty")(hidden)))
    model.compile(keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, LENGTH + 1, ROWS)
    real = np.arange(LENGTH)[None] < lengths[:, None]
    x = np.where(real, rng.integers(1, 10, (ROWS, LENGTH)), 0).astype("int32")
    y = rng.integers(0, 3, (ROWS, LENGTH)).astype("int32")
    with pytest.warns(gaviz.InexactAddedLoss, match=r"by penalty is a mean over rows, but the "
                                                    r"compiled loss divides by"):
        gaviz.AccumulationTrainer(model, accumulation_steps=2).fit(
            x, y, batch_size=B, epochs=1, verbose=0)
