"""Losses that couple a batch's rows train with the cached window, equal to
Model.fit(batch_size=k * b): weights, optimizer variables and history.

Each loss here is one a summing window cannot take (its value for a row reads
the batch's other rows, or it is one value for the batch); the trainer found
that and said so once (gaviz.training.cached.choice). Every comparison was seen
failing with the window summing micro-batches instead
(``test_summing_the_micro_batches_is_away_from_model_fit``)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_history, assert_same_weights, start_of
from keras import ops
from test_coupled_loss import embedder, in_batch_negatives, labelled

import gaviz
from gaviz.training.cached.choice import CachedWindowUsed
from gaviz.training.verify.closeness import variable_gaps

B, K, ROWS = 4, 3, 26  # windows of 12 rows: 12, 12 and 2


class BatchStandardized(keras.losses.Loss):
    """Each row's squared error over one plus the batch's mean squared error."""

    def call(self, y_true, y_pred):
        errors = ops.mean(ops.square(ops.cast(y_true, y_pred.dtype)[:, None] - y_pred), axis=-1)
        return errors / (1.0 + ops.mean(errors))


class TripletBatchHard(keras.losses.Loss):
    """Each row's hardest positive and hardest negative in the batch, margin 0.5."""

    def call(self, y_true, y_pred):
        distance = ops.sum(ops.square(y_pred[:, None] - y_pred[None]), axis=-1)
        same = ops.equal(y_true[:, None], y_true[None, :])
        hardest_positive = ops.max(ops.where(same, distance, 0.0), axis=1)
        hardest_negative = ops.min(ops.where(same, 1e9, distance), axis=1)
        return ops.relu(hardest_positive - hardest_negative + 0.5)


def batch_mean(y_true, y_pred):
    """One value for the whole batch: a mean over it, returned as a scalar."""
    return ops.mean(ops.square(ops.cast(y_true, y_pred.dtype)[:, None] - y_pred))


def hardest_rows(y_true, y_pred):
    """The mean of the batch's 3 largest row errors (online hard example mining)."""
    errors = ops.mean(ops.square(ops.cast(y_true, y_pred.dtype)[:, None] - y_pred), axis=-1)
    return ops.mean(tf.math.top_k(errors, tf.minimum(3, tf.shape(errors)[0]))[0])


LOSSES = {
    "Circle": lambda: keras.losses.Circle(),
    "triplet batch-hard": lambda: TripletBatchHard(name="triplet"),
    "in-batch negatives": lambda: in_batch_negatives,
    "batch-standardized": lambda: BatchStandardized(name="standardized"),
    "Dice": lambda: keras.losses.Dice(),
    "a scalar": lambda: batch_mean,
    "top-k hardest rows": lambda: hardest_rows,
}


def optimizer_values(model):
    return [np.array(v) for v in model.optimizer.variables]


def assert_same_state(ours, theirs, start, optimizer_start, terms=K * B, rounding=None):
    """Weights and optimizer variables by the one rule (closeness)."""
    for got, expected, begun, names in (
            (ours.get_weights(), theirs.get_weights(), start, [v.path for v in theirs.weights]),
            (optimizer_values(ours), optimizer_values(theirs), optimizer_start,
             [v.path for v in theirs.optimizer.variables])):
        gaps = variable_gaps(got, expected, begun, terms, names, rounding)
        unequal = [g for g in gaps if not g.equal]
        assert not unequal, "; ".join(f"{g.name}: {g.relative:.3g} of its movement"
                                      for g in unequal[:4])


def trained(make, x, y, fit_kwargs=None, trainer_kwargs=None, epochs=2, keras_x=None,
            keras_y=None, keras_epochs=None, rows=None):
    """``make()`` by gaviz (b = B, k = K) and by Model.fit (batches of K * B)."""
    fit_kwargs = fit_kwargs or {}
    ours, theirs = make(), make()
    for model in (ours, theirs):
        model.optimizer.build(model.trainable_variables)
    start, optimizer_start = start_of(ours), optimizer_values(ours)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        trainer = gaviz.AccumulationTrainer(ours, accumulation_steps=K, **(trainer_kwargs or {}))
        history = trainer.fit(x, y, batch_size=B, epochs=epochs, shuffle=False, verbose=0,
                              **fit_kwargs)
    keep = slice(rows)
    expected = theirs.fit((x if keras_x is None else keras_x)[keep],
                          tree_rows(y if keras_y is None else keras_y, keep),
                          batch_size=K * B, epochs=keras_epochs or epochs, shuffle=False,
                          verbose=0, **{n: v[keep] if isinstance(v, np.ndarray) else v
                                        for n, v in fit_kwargs.items()})
    cached = [w for w in said if issubclass(w.category, CachedWindowUsed)]
    return trainer, ours, theirs, start, optimizer_start, history, expected, cached


def tree_rows(y, keep):
    return {k: v[keep] for k, v in y.items()} if isinstance(y, dict) else y[keep]


# ------------------------------------------------------------------ losses


def targets_for(name, y):
    """Labels, or for Dice, which compares shapes, one-hot rows of the outputs' width."""
    return np.eye(4, dtype="float32")[y] if name == "Dice" else y


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_loss_that_couples_rows_equals_model_fit(name):
    x, y = labelled()
    y = targets_for(name, y)
    trainer, ours, theirs, start, optimizer_start, got, expected, cached = trained(
        lambda: embedder(LOSSES[name](), optimizer=keras.optimizers.Adam(0.05)), x, y)
    assert_same_state(ours, theirs, start, optimizer_start)
    assert_same_history(got.history, expected.history)
    assert len(cached) == 1 and "One more forward pass" in str(cached[0].message), cached


class SummedPerMicroBatch(gaviz.AccumulationTrainer):
    """A coupled loss summed micro-batch by micro-batch (each row meets only its own
    micro-batch's rows): what the cached window answers."""

    rule = gaviz.Rule(caches_coupled_loss=False)


@pytest.mark.parametrize("name", ["Circle", "in-batch negatives", "triplet batch-hard",
                                  "batch-standardized"])
def test_summing_the_micro_batches_is_away_from_model_fit(name):
    x, y = labelled()
    ours, theirs = (embedder(LOSSES[name](), optimizer=keras.optimizers.Adam(0.05))
                    for _ in range(2))
    start = start_of(ours)
    SummedPerMicroBatch(ours, accumulation_steps=K).fit(x, y, batch_size=B, epochs=2,
                                                        shuffle=False, verbose=0)
    theirs.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    gaps = variable_gaps(ours.get_weights(), theirs.get_weights(), start, K * B)
    assert max(g.relative for g in gaps) > 0.01, gaps


def test_two_outputs_one_coupled_one_per_row_with_loss_weights_equal_model_fit():
    x, y = labelled()

    def make():
        keras.utils.set_random_seed(1)
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(8, activation="tanh")(inputs)
        model = keras.Model(inputs, {
            "embedding": keras.layers.UnitNormalization()(keras.layers.Dense(4, name="e")(hidden)),
            "score": keras.layers.Dense(1, name="score_dense")(hidden)})
        model.compile(keras.optimizers.Adam(0.05),
                      loss={"embedding": in_batch_negatives, "score": "mse"},
                      loss_weights={"embedding": 0.5, "score": 1.0})
        return model

    targets = {"embedding": y, "score": x[:, :1]}
    trainer, ours, theirs, start, optimizer_start, got, expected, _ = trained(make, x, targets)
    assert_same_state(ours, theirs, start, optimizer_start)
    assert_same_history(got.history, expected.history)  # the per-output entries too


# --------------------------------------------------------- fit's arguments


def test_sample_and_class_weights_equal_model_fit():
    x, y = labelled()
    weights = np.random.default_rng(3).uniform(0.2, 2.0, ROWS).astype("float32")
    for fit_kwargs in ({"sample_weight": weights}, {"class_weight": {0: 0.5, 1: 2.0, 2: 1.0}}):
        trainer, ours, theirs, start, optimizer_start, got, expected, _ = trained(
            lambda: embedder(keras.losses.Circle(), optimizer=keras.optimizers.Adam(0.05)),
            x, y, fit_kwargs)
        assert_same_state(ours, theirs, start, optimizer_start)
        assert_same_history(got.history, expected.history)


@pytest.mark.parametrize("tail", ["drop", "carry"])
def test_the_other_tails_equal_model_fit_on_their_rows(tail):
    """drop: Model.fit on the full windows' rows; carry: a window spans epochs (its
    micro-batches kept between calls), as Model.fit on the epochs end to end."""
    make = lambda: embedder(in_batch_negatives, optimizer=keras.optimizers.Adam(0.05))  # noqa: E731
    if tail == "drop":
        x, y = labelled()
        found = trained(make, x, y, trainer_kwargs={"tail": "drop"}, rows=24)
    else:  # 2 epochs of 7 micro-batches: 4 windows of 12 rows across them, 2 left open
        x, y = labelled(rows=28)
        found = trained(make, x, y, trainer_kwargs={"tail": "carry"},
                        keras_x=np.concatenate([x, x]), keras_y=np.concatenate([y, y]),
                        keras_epochs=1, rows=48)
    trainer, ours, theirs, start, optimizer_start = found[:5]
    assert_same_state(ours, theirs, start, optimizer_start)
    if tail == "carry":
        assert int(trainer.micro_steps_in_window.numpy()) == 2


def test_a_dataset_with_a_short_last_micro_batch_equals_model_fit():
    x, y = labelled()
    ours, theirs = (embedder(keras.losses.Circle(), optimizer=keras.optimizers.Adam(0.05))
                    for _ in range(2))
    start = start_of(ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CachedWindowUsed)
        got = gaviz.AccumulationTrainer(ours, accumulation_steps=K).fit(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(B), epochs=2, verbose=0)
    expected = theirs.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(ours, theirs, start, K * B)
    assert_same_history(got.history, expected.history)


@pytest.mark.parametrize("jit_compile", [True, "auto"])
def test_under_xla_equals_model_fit(jit_compile):
    x, y = labelled()
    trainer, ours, theirs, start, optimizer_start, got, expected, _ = trained(
        lambda: embedder(keras.losses.Circle(), optimizer=keras.optimizers.Adam(0.05)), x, y,
        trainer_kwargs={"jit_compile": jit_compile})
    assert trainer.jit_compile == (jit_compile is True)
    assert_same_state(ours, theirs, start, optimizer_start)


def test_mixed_precision_with_loss_scaling_equals_model_fit():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, y = labelled()
        found = trained(lambda: embedder(in_batch_negatives, optimizer=(
            keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.05),
                                                initial_scale=2.0**8))), x, y)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    trainer, ours, theirs, start, optimizer_start, got, expected, _ = found
    assert isinstance(ours.optimizer, keras.optimizers.LossScaleOptimizer)
    assert_same_state(ours, theirs, start, optimizer_start, rounding="float16")
    np.testing.assert_allclose(got.history["loss"], expected.history["loss"], rtol=1e-3)


# ---------------------------------------------- what the model adds itself


def test_added_losses_and_weight_penalties_count_once_per_window():
    """An activity regularizer (a mean over rows) and a kernel regularizer: the
    window adds each as Model.fit adds them to its batch's loss."""
    x, y = labelled()

    def make():
        keras.utils.set_random_seed(2)
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(8, activation="tanh",
                                    activity_regularizer=keras.regularizers.L2(0.01),
                                    kernel_regularizer=keras.regularizers.L2(0.01))(inputs)
        model = keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(4)(hidden)))
        model.compile(keras.optimizers.Adam(0.05), keras.losses.Circle())
        return model

    trainer, ours, theirs, start, optimizer_start, got, expected, _ = trained(make, x, y)
    assert_same_state(ours, theirs, start, optimizer_start)
    assert_same_history(got.history, expected.history)


def dropout_embedder(loss):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    hidden = keras.layers.Dropout(0.3, seed=7)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(4)(hidden)))
    model.compile(keras.optimizers.SGD(0.1), loss)
    return model


def test_the_second_pass_draws_the_first_passs_dropout_masks():
    """At one micro-batch a window, the cached window's first pass draws what the
    summing window's one pass draws; its second pass must draw it again, or its
    gradient is not the gradient of the loss it computed, and the two part."""
    x, y = labelled()
    y = y[:, None].astype("float32") * np.ones((1, 4), "float32")
    summed, cached = dropout_embedder("mse"), dropout_embedder("mse")
    start = start_of(summed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CachedWindowUsed)
        for model, cache in ((summed, False), (cached, True)):
            gaviz.AccumulationTrainer(model, accumulation_steps=1, cached_window=cache).fit(
                x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(cached, summed, start, B)


def test_moving_statistics_move_once_per_micro_batch():
    """BatchNormalization's moving statistics: the cached window's two passes move
    them as the summing window's one does, once per micro-batch."""
    x, y = labelled()

    def make():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((6,))
        # No bias before the normalization: its gradient is rounding alone.
        hidden = keras.layers.BatchNormalization(momentum=0.5)(
            keras.layers.Dense(8, use_bias=False)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
        model.compile(keras.optimizers.SGD(0.1), "mse")
        return model

    summed, cached = make(), make()
    start = start_of(summed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model, cache in ((summed, False), (cached, True)):
            gaviz.AccumulationTrainer(model, accumulation_steps=K, cached_window=cache).fit(
                x, y[:, None].astype("float32"), batch_size=B, epochs=2, shuffle=False,
                verbose=0)
    assert_same_weights(cached, summed, start, K * B)  # moving statistics included


# ------------------------------------------------------------- the choice


def test_the_old_refusal_is_one_argument_away():
    x, y = labelled()
    with pytest.raises(gaviz.CoupledLoss, match="'circle' couples"):
        gaviz.AccumulationTrainer(embedder(keras.losses.Circle()), accumulation_steps=K,
                                  cached_window=False).fit(x, y, batch_size=B, verbose=0)


def test_a_per_row_loss_may_ask_for_the_cached_window_and_equals_model_fit():
    x, y = labelled()
    trainer, ours, theirs, start, optimizer_start, got, expected, cached = trained(
        lambda: embedder("mse", optimizer=keras.optimizers.Adam(0.05)), x,
        y[:, None].astype("float32") * np.ones((1, 4), "float32"),
        trainer_kwargs={"cached_window": True})
    assert "cached_window=True" in str(cached[0].message)
    assert_same_state(ours, theirs, start, optimizer_start)
    assert_same_history(got.history, expected.history)


def test_a_per_row_loss_is_summed_by_default():
    x, y = labelled()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CachedWindowUsed)
        trainer = gaviz.AccumulationTrainer(embedder("mse"), accumulation_steps=K)
        trainer.fit(x, y[:, None].astype("float32") * np.ones((1, 4), "float32"), batch_size=B,
                    verbose=0)
    assert not trainer._cached


def test_bad_cached_window_is_named():
    with pytest.raises(ValueError, match="`cached_window` must be one of"):
        gaviz.AccumulationTrainer(embedder("mse"), accumulation_steps=K, cached_window="yes")


# ---------------------------------------------------------------- own loop


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
def test_an_own_loop_with_cached_gradients_equals_model_fit(graph):
    """gaviz.cached_gradients on each window's micro-batches, applied by the loop."""
    x, y = labelled()
    ours, theirs = (embedder(keras.losses.Circle(), optimizer=keras.optimizers.Adam(0.05))
                    for _ in range(2))
    start = start_of(ours)
    loss = keras.losses.Circle()

    def window_step(window):
        gradients, value = gaviz.cached_gradients(ours, loss, window)
        ours.optimizer.apply_gradients(zip(gradients, ours.trainable_variables))
        return value

    step = tf.function(window_step) if graph else window_step
    for _ in range(2):
        for start_row in range(0, ROWS, K * B):
            window = [(x[s:s + B], y[s:s + B])
                      for s in range(start_row, min(start_row + K * B, ROWS), B)]
            step(window)
    theirs.fit(x, y, batch_size=K * B, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(ours, theirs, start, K * B)


def test_cached_gradients_of_nothing_is_refused():
    with pytest.raises(ValueError, match="`micro_batches` must hold at least one"):
        gaviz.cached_gradients(embedder("mse"), keras.losses.Circle(), [])


def test_verify_judges_a_coupled_loss_as_any_other():
    x, y = labelled(rows=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CachedWindowUsed)
        result = gaviz.AccumulationTrainer(
            embedder(keras.losses.Circle(), optimizer=keras.optimizers.Adam(0.05)),
            accumulation_steps=K).verify(x, y, batch_size=B)
    assert result.equal, result


def test_an_embeddings_rows_reach_the_optimizer_as_model_fits_do():
    """Sparse gradients under the cached window: each micro-batch's second pass
    adds its rows of the table (tests/training/test_sparse_gradients.py), Adam
    applies them as Model.fit does."""
    rng = np.random.default_rng(4)
    tokens = np.minimum(rng.geometric(0.3, (ROWS, 5)), 19).astype("int32")
    labels = rng.integers(0, 3, ROWS).astype("int32")

    def make():
        keras.utils.set_random_seed(4)
        model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(20, 4),
                                  keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4),
                                  keras.layers.UnitNormalization()])
        model.compile(keras.optimizers.Adam(0.05), in_batch_negatives)
        return model

    trainer, ours, theirs, start, optimizer_start, got, expected, _ = trained(make, tokens, labels)
    assert trainer.window_loop.sparse == {0}
    assert_same_state(ours, theirs, start, optimizer_start)
    assert_same_history(got.history, expected.history)


def test_several_replicas_and_other_rules_are_refused_by_name():
    """Model.fit under a strategy computes a coupled loss on each replica's contiguous
    share of its batch, which no window's replicas hold: refused, as is a rule that
    sums micro-batches its own way."""
    from gaviz.training.fit import checks

    class TwoReplicas:
        num_replicas_in_sync = 2

    with pytest.raises(ValueError, match="strategy has 2 replicas.*contiguous share"):
        checks.check_cached_window(TwoReplicas(), exact_rule=True)
    with pytest.raises(ValueError, match="another `rule`"):
        checks.check_cached_window(tf.distribute.get_strategy(), exact_rule=False)
