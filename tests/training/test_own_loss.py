"""A model that customises Keras's steps: its own compute_loss is honoured (equal
to Model.fit) when it is a mean over the batch's rows, and refused by name when
it is not; an overridden train_step is refused by name, with what to do instead.
Never silently trained another way."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_history, assert_same_weights, make_mlp, start_of
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
    start = start_of(model)
    ours = trainer.fit(x, y, batch_size=B, epochs=3, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, batch_size=K * B, epochs=3, shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=K * B)
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
    start = start_of(model)
    for m in (model, reference):
        m.compile(optimizer=keras.optimizers.Adam(0.01))
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=K * B)


# A token mean: the check must find it whatever the first micro-batch holds.

LENGTH = 6


class TokenMean(keras.Model):
    """A tagger whose compute_loss averages over real tokens (Keras's own loss,
    compiled with ignore_class=0: a mean over unmasked tokens, not over rows)."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return super().compute_loss(x, y, y_pred, sample_weight, training)


def token_mean_model():
    keras.utils.set_random_seed(3)
    tokens = keras.Input((LENGTH,), dtype="int32")
    hidden = keras.layers.Embedding(10, 4)(tokens)
    model = TokenMean(tokens, keras.layers.Dense(4)(hidden))
    model.compile(keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 ignore_class=0))
    return model


def tokens_of_lengths(lengths, seed=0):
    rng = np.random.default_rng(seed)
    real = np.arange(LENGTH)[None, :] < np.asarray(lengths)[:, None]
    tokens = np.where(real, rng.integers(1, 10, (len(lengths), LENGTH)), 0).astype("int32")
    return tokens, np.where(real, rng.integers(1, 4, (len(lengths), LENGTH)), 0).astype("int32")


@pytest.mark.parametrize("lengths", [
    [2, 4, 4, 2] + [1, 6, 3, 5] * 3,  # the first micro-batch's halves hold 6 tokens each
    [3] * 8 + [1, 6, 2, 5] * 2,  # the first two micro-batches: 3 tokens in every row
], ids=["equal-halves", "uniform-start"])
@pytest.mark.parametrize("form", ["arrays", "dataset"])
def test_a_token_mean_compute_loss_is_refused_whatever_the_first_micro_batch_holds(lengths,
                                                                                  form):
    """The old check compared the first micro-batch with its two halves: where
    the halves hold equal tokens a token mean passes for a row mean, and the
    trainer then weighed token means by rows (silently off)."""
    x, y = tokens_of_lengths(lengths)
    trainer = gaviz.AccumulationTrainer(token_mean_model(), accumulation_steps=2)
    data = dict(x=x, y=y, batch_size=4) if form == "arrays" else dict(
        x=tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
    with pytest.raises(ValueError, match=r"overrides compute_loss \(TokenMean\.compute_loss\) "
                                         r"with a loss that is not a mean over the batch's "
                                         r"rows.*real tokens"):
        trainer.fit(**data, epochs=1, shuffle=False, verbose=0)
    assert int(trainer.optimizer.iterations.numpy()) == 0  # refused before training


class InBatchNegatives(keras.Model):
    """A contrastive loss that makes its own targets (SigLIP's pattern): each row's
    match is on the diagonal of the batch's similarity matrix, the other rows
    of the batch are its negatives. Trained with fit(x), no y."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        left, right = y_pred
        logits = ops.matmul(left, ops.transpose(right))
        labels = ops.arange(ops.shape(logits)[0])
        return ops.mean(keras.losses.sparse_categorical_crossentropy(
            labels, logits, from_logits=True))


def contrastive_model():
    keras.utils.set_random_seed(4)
    a, b = keras.Input((5,)), keras.Input((5,))
    model = InBatchNegatives([a, b], [keras.layers.Dense(3)(a), keras.layers.Dense(3)(b)])
    model.compile(keras.optimizers.Adam(0.01))
    return model


def test_a_contrastive_compute_loss_trained_without_targets_is_refused_by_name():
    """fit(x) with no y, as Model.fit takes it, reaches the loss check (it used
    to stop at "`y` must be given") and is refused before training."""
    rng = np.random.default_rng(0)
    x = [rng.normal(size=(32, 5)).astype("float32") for _ in range(2)]
    model = contrastive_model()
    model.fit(x, batch_size=16, epochs=1, verbose=0)  # Model.fit takes it
    trainer = gaviz.AccumulationTrainer(contrastive_model(), accumulation_steps=2)
    before = [w.copy() for w in trainer.model.get_weights()]
    with pytest.raises(ValueError, match=r"overrides compute_loss "
                                         r"\(InBatchNegatives\.compute_loss\) with a loss "
                                         r"that is not a mean.*couples the rows"):
        trainer.fit(x, batch_size=8, epochs=1, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(before, trainer.model.get_weights()))
