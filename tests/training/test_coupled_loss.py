"""Every compiled loss is known per-row or checked for coupled rows before
training (gaviz.training.loss.row_losses): Circle, in-batch negatives and a loss
that normalizes over its batch train with the cached window
(tests/training/test_cached_window.py), or, with cached_window=False, are
refused by name; Keras's per-row losses are
not probed and stay equal to Model.fit, and so do an own per-row function, a
sample-weighted and a masked per-token Loss. A window whose loss counts
nothing steps as Model.fit does on such a batch."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_history, assert_same_weights, start_of
from keras import ops

import gaviz
from gaviz.training.loss import row_losses

B, K, ROWS = 4, 3, 26  # windows of 12 rows: 12, 12, 2


def embedder(loss, seed=0, optimizer=None):
    """Unit-length embeddings of 6 features, compiled with ``loss``."""
    keras.utils.set_random_seed(seed)
    x = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="tanh")(x)
    model = keras.Model(x, keras.layers.UnitNormalization()(keras.layers.Dense(4)(hidden)))
    model.compile(optimizer or keras.optimizers.SGD(0.1, momentum=0.9), loss=loss)
    return model


def labelled(rows=ROWS, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, 6)).astype("float32"), rng.integers(0, 3, rows).astype("int32")


def in_batch_negatives(y_true, y_pred):
    """Each row's cross-entropy against every row of its batch as candidates."""
    similarity = ops.matmul(y_pred, ops.transpose(y_pred)) * 5.0
    same = ops.cast(ops.equal(y_true[:, None], y_true[None, :]), similarity.dtype)
    return ops.logsumexp(similarity, axis=1) - ops.sum(similarity * same, axis=1) / ops.sum(
        same, axis=1)


class BatchNormalizedError(keras.losses.Loss):
    """Each row's squared error over the batch's mean squared error."""

    def call(self, y_true, y_pred):
        errors = ops.mean(ops.square(ops.cast(y_true, y_pred.dtype)[:, None] - y_pred), axis=-1)
        return errors / ops.mean(errors)


class ErrorOverTargets(keras.losses.Loss):
    """Row-wise values, but a __call__ that divides their sum by the targets' sum."""

    def call(self, y_true, y_pred):
        return ops.mean(ops.square(ops.cast(y_true, y_pred.dtype)[:, None] - y_pred), axis=-1)

    def __call__(self, y_true, y_pred, sample_weight=None):
        return ops.sum(self.call(y_true, y_pred)) / (ops.sum(ops.cast(y_true, "float32")) + 7.0)


COUPLED = {
    "circle": (keras.losses.Circle(), r"`loss` 'circle' couples the batch's rows.*masked out on"),
    "in-batch negatives": (in_batch_negatives, r"'in_batch_negatives' couples the batch's rows"),
    "batch-normalized": (BatchNormalizedError(name="normalized"),
                         r"'normalized' couples the batch's rows: on 16 rows"),
}


@pytest.mark.parametrize("name", sorted(COUPLED))
@pytest.mark.parametrize("feed", ["arrays", "dataset"])
def test_a_loss_that_couples_rows_is_refused_by_name_before_training(name, feed):
    loss, says = COUPLED[name]
    model = embedder(loss)
    before = start_of(model)
    x, y = labelled()
    data = dict(x=x, y=y, batch_size=B) if feed == "arrays" else dict(
        x=tf.data.Dataset.from_tensor_slices((x, y)).batch(B))
    with pytest.raises(gaviz.CoupledLoss, match=says + r".*cached_window='auto'.*Accumulator"):
        gaviz.AccumulationTrainer(model, accumulation_steps=K, cached_window=False).fit(
            **data, epochs=1, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


def test_a_coupled_loss_is_found_on_rows_from_across_the_data():
    """The first micro-batch holds one class only (no pair for Circle to count
    beside a row's own): the rows probed come from across the data."""
    x, y = labelled()
    order = np.argsort(y, kind="stable")
    with pytest.raises(gaviz.CoupledLoss):
        gaviz.AccumulationTrainer(embedder(keras.losses.Circle()), accumulation_steps=K,
                                  cached_window=False).fit(x[order], y[order], batch_size=B,
                                                           epochs=1, verbose=0)


def test_the_trainers_own_loss_argument_and_one_output_of_several_are_checked():
    x, y = labelled()
    with pytest.raises(gaviz.CoupledLoss, match="'circle' couples"):
        gaviz.AccumulationTrainer(embedder("mse"), loss=keras.losses.Circle(),
                                  accumulation_steps=K, cached_window=False).fit(
            x, y, batch_size=B, verbose=0)
    keras.utils.set_random_seed(1)
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    model = keras.Model(inputs, {
        "embedding": keras.layers.UnitNormalization()(keras.layers.Dense(4, name="e")(hidden)),
        "score": keras.layers.Dense(1, name="score_dense")(hidden)})
    model.compile(keras.optimizers.SGD(0.1), loss={"embedding": in_batch_negatives,
                                                   "score": "mse"},
                  loss_weights={"embedding": 0.5, "score": 1.0})
    targets = {"embedding": y, "score": x[:, :1]}
    with pytest.raises(gaviz.CoupledLoss,
                       match="'in_batch_negatives' for output 'embedding' couples"):
        gaviz.AccumulationTrainer(model, accumulation_steps=K, cached_window=False).fit(
            x, targets, batch_size=B, verbose=0)


def test_a_call_that_reduces_otherwise_is_refused():
    x, y = labelled()
    with pytest.raises(ValueError, match=r"'error_over_targets' \(ErrorOverTargets\) overrides "
                                         r"__call__.*divided by the number of loss elements"):
        gaviz.AccumulationTrainer(embedder(ErrorOverTargets()), accumulation_steps=K,
                                  cached_window=False).fit(x, y, batch_size=B, verbose=0)


def test_a_coupled_loss_at_one_micro_batch_a_window_is_model_fit():
    """At accumulation_steps=1 each window is Model.fit's batch: nothing to refuse."""
    x, y = labelled()
    model, reference = embedder(keras.losses.Circle()), embedder(keras.losses.Circle())
    start = start_of(model)
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=1).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms=B)


# ----------------------------------------------------------- per-row losses

def test_kerass_per_row_losses_are_known_and_others_are_not():
    known = [keras.losses.MeanSquaredError(), keras.losses.Huber(), keras.losses.Poisson(),
             keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
             keras.losses.CategoricalFocalCrossentropy(), keras.losses.BinaryCrossentropy(),
             keras.losses.CTC(), keras.losses.KLDivergence()]
    assert all(row_losses.known_row_wise(loss) for loss in known)
    unknown = [keras.losses.Circle(), keras.losses.Dice(), keras.losses.Tversky(),
               keras.losses.CosineSimilarity(), keras.losses.CategoricalCrossentropy(axis=0),
               BatchNormalizedError(), ErrorOverTargets()]
    assert not any(row_losses.known_row_wise(loss) for loss in unknown)

    class Renormalized(keras.losses.MeanSquaredError):  # a known class, its call changed
        def call(self, y_true, y_pred):
            values = super().call(y_true, y_pred)
            return values / ops.mean(values)

    assert not row_losses.known_row_wise(Renormalized())


def test_a_known_loss_is_not_probed(monkeypatch, regression_data):
    def probed(*args):
        raise AssertionError("a known per-row loss was probed")

    monkeypatch.setattr(row_losses, "first_coupling", probed)
    x, y = regression_data
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(x, y, batch_size=B, verbose=0)


def fit_both(make, x, y, weights=None, k=K, b=B, epochs=2):
    model, reference = make(), make()
    start = start_of(model)
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=k).fit(
        x, y, sample_weight=weights, batch_size=b, epochs=epochs, shuffle=False, verbose=0)
    theirs = reference.fit(x, y, sample_weight=weights, batch_size=k * b, epochs=epochs,
                           shuffle=False, verbose=0)
    assert_same_history(ours.history, theirs.history)
    return model, reference, start


def per_row_error(y_true, y_pred):
    """An own per-row function (not Keras's): checked, found per-row, trained."""
    return ops.mean(ops.abs(ops.cast(y_true, y_pred.dtype)[:, None] - y_pred), axis=-1)


def test_an_own_per_row_loss_is_checked_and_equals_model_fit_with_sample_weights():
    x, y = labelled()
    weights = np.random.default_rng(3).uniform(0.2, 2.0, ROWS).astype("float32")
    model, reference, start = fit_both(lambda: embedder(per_row_error), x, y, weights)
    assert_same_weights(model, reference, start, terms=K * B)


class TokenError(keras.losses.Loss):
    """A per-token cross-entropy written as an own Loss (masked by the Embedding)."""

    def call(self, y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)


def tagger(seed=3):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((5,), dtype="int32"),
                              keras.layers.Embedding(9, 4, mask_zero=True),
                              keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(3)])
    model.compile(keras.optimizers.SGD(0.2, momentum=0.9), loss=TokenError())
    return model


def tokens(rows, empty=()):
    """Right-padded rows of tokens, labels on real tokens; ``empty`` rows all padding."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 6, rows)
    lengths[list(empty)] = 0
    real = np.arange(5)[None] < lengths[:, None]
    return (np.where(real, rng.integers(1, 9, (rows, 5)), 0).astype("int32"),
            np.where(real, rng.integers(0, 3, (rows, 5)), 0).astype("int32"))


def test_a_masked_per_token_loss_of_its_own_is_checked_and_equals_model_fit():
    x, y = tokens(ROWS)
    model, reference, start = fit_both(tagger, x, y)
    assert_same_weights(model, reference, start, terms=K * B * 5)


# --------------------------------------------- a window whose loss counts nothing

@pytest.mark.parametrize("empty", [range(12, 24), range(24, 26)], ids=["a full window", "the tail"])
def test_a_window_with_every_token_masked_steps_as_model_fit_does(empty):
    """Model.fit's loss on a batch of padding alone is 0: it still steps, with a
    zero gradient that moves momentum and iterations. So does the trainer's window."""
    x, y = tokens(ROWS, empty=empty)
    model, reference, start = fit_both(tagger, x, y)
    assert int(model.optimizer.iterations) == int(reference.optimizer.iterations) == 6
    assert_same_weights(model, reference, start, terms=K * B * 5)
