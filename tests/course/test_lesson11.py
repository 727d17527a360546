"""Lesson 11's exercise checker (freeze a model's batch normalization) passes the solution and
names the usual mistakes; and what lesson 11 and the guide's caveats page say about Keras's
built-in `gradient_accumulation_steps`, about frozen batch normalization and about an Embedding's
sparse gradients, checked against independent computations, so that their sentences fail a test
when a Keras release changes them. (Diagnose's verdict on the built-in is
tests/gallery/test_diagnose.py's.)"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import gaviz
from gaviz.course import accumulation_epoch, flat_weights, lesson11

K, B, LR = 3, 4, 0.1


def token_window():
    """One window of padded sequences sorted by length: micro-batches with 5, 20, 38 tokens."""
    x, y, mask = gaviz.demo.make_token_data(sequences=K * B, seed=0)
    order = np.argsort(mask.sum(axis=1), kind="stable")
    return x[order], y[order], mask[order]


def token_model(x, masking):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input(x.shape[1:]), *([keras.layers.Masking(0.0)] if masking else []),
                             keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(5)])


def fit_step(x, y, masking, batch_size, steps=None, sample_weight=None):
    model = token_model(x, masking)
    model.compile(keras.optimizers.SGD(LR, gradient_accumulation_steps=steps),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = flat_weights(model)
    model.fit(x, y, sample_weight=sample_weight, batch_size=batch_size, epochs=1, shuffle=False,
              verbose=0)
    return flat_weights(model) - before


def mean_of_token_means_step(x, y, mask):
    """By hand: SGD on the mean over micro-batches of each one's loss over its own real tokens."""
    model = token_model(x, masking=False)
    per_token = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    with tf.GradientTape() as tape:
        means = [tf.reduce_sum(per_token(y[i:i + B], model(x[i:i + B])) * mask[i:i + B])
                 / mask[i:i + B].sum() for i in range(0, K * B, B)]
        objective = tf.add_n(means) / K
    return -LR * np.concatenate([g.numpy().ravel()
                                 for g in tape.gradient(objective, model.trainable_variables)])


def relative(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_with_a_mask_on_the_output_the_builtin_averages_per_token_means():
    x, y, mask = token_window()
    assert list(mask.reshape(K, -1).sum(axis=1)) == [5, 20, 38]
    builtin = fit_step(x, y, masking=True, batch_size=B, steps=K)
    assert relative(builtin, mean_of_token_means_step(x, y, mask)) < 1e-5
    assert relative(builtin, fit_step(x, y, masking=True, batch_size=K * B)) > 0.1  # the lesson: 40%


def test_with_a_padding_sample_weight_the_builtin_matches_the_big_batch_over_positions():
    x, y, mask = token_window()
    builtin = fit_step(x, y, masking=False, batch_size=B, steps=K, sample_weight=mask)
    big = fit_step(x, y, masking=False, batch_size=K * B, sample_weight=mask)
    assert relative(builtin, big) < 1e-5
    # ... and that loss divides by positions, padding included, not by real tokens:
    assert relative(big, mean_of_token_means_step(x, y, mask)) > 0.1
    over_tokens = fit_step(x, y, masking=True, batch_size=K * B)  # the big batch's real-token mean
    assert relative(big, over_tokens) > 0.1


def test_the_builtin_schedule_boundary_that_matches_is_boundary_plus_one_times_k_minus_one():
    k, micro, boundary, updates = 4, 16, 3, 8
    x, y = gaviz.demo.make_data(updates * k * micro, seed=0)

    def schedule(b):
        return keras.optimizers.schedules.PiecewiseConstantDecay([b], [0.1, 0.01])

    reference = gaviz.demo.make_model(seed=0)
    reference.compile(keras.optimizers.SGD(schedule(boundary)), "mse")
    reference.fit(x, y, batch_size=k * micro, epochs=1, shuffle=False, verbose=0)
    gaps = {}
    for b in (boundary, boundary * k, (boundary + 1) * k - 1):
        model = gaviz.demo.make_model(seed=0)
        model.compile(keras.optimizers.SGD(schedule(b), gradient_accumulation_steps=k), "mse")
        model.fit(x, y, batch_size=micro, epochs=1, shuffle=False, verbose=0)
        gaps[b] = float(np.max(np.abs(flat_weights(model) - flat_weights(reference))))
    assert gaps[(boundary + 1) * k - 1] < 1e-6
    assert gaps[boundary] > 1e-2 and gaps[boundary * k] > 1e-2


def test_a_frozen_batch_normalization_accumulates_exactly_and_a_trained_one_does_not():
    x, y = gaviz.demo.make_data(64, seed=0)

    def step(trainable, micro):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((gaviz.demo.FEATURES,)), keras.layers.Dense(32),
                                  keras.layers.BatchNormalization(trainable=trainable),
                                  keras.layers.Activation("tanh"), keras.layers.Dense(1)])
        before = flat_weights(model)
        accumulation_epoch(model, keras.optimizers.SGD(LR), keras.losses.MeanSquaredError(),
                           tf.data.Dataset.from_tensor_slices((x, y)).batch(micro), 64 // micro)
        return flat_weights(model) - before

    assert relative(step(False, 16), step(False, 64)) < 1e-5
    assert relative(step(True, 16), step(True, 64)) > 0.05


def one_adam_step(dense):
    """Adam's v and the row's step: one row looked up 50 times, each lookup's gradient 1."""
    table = keras.layers.Embedding(1, 1, embeddings_initializer="zeros")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(table(tf.zeros(50, "int32")))
    gradient = tape.gradient(loss, table.embeddings)
    assert isinstance(gradient, tf.IndexedSlices) and gradient.values.shape[0] == 50
    adam = keras.optimizers.Adam(0.1)
    applied = tf.convert_to_tensor(gradient) if dense else gradient
    adam.apply_gradients([(applied, table.embeddings)])
    [v] = [variable for variable in adam.variables if "velocity" in variable.name]
    return float(v[0, 0]), abs(float(table.embeddings[0, 0]))


def test_keras_adam_squares_each_lookup_of_a_row_and_the_textbook_their_sum():
    assert one_adam_step(dense=False) == pytest.approx((0.05, 0.1 * 50 ** 0.5), rel=1e-4)
    assert one_adam_step(dense=True) == pytest.approx((2.5, 0.1), rel=1e-4)


def test_with_an_embedding_model_fit_leaves_the_dense_big_batch_with_adam_not_with_sgd():
    """The first cell's pointer to sparse gradients: Model.fit on batches of 64, gaviz's
    trainer (k = 4 micro-batches of 16) and the big batch with its gradient made dense,
    2 epochs: gaviz is Model.fit, which leaves the dense big batch with Adam, not with
    SGD; nothing is said."""
    from gaviz.course import max_difference

    tokens = np.random.default_rng(0).integers(0, 50, size=(256, 10))
    targets = (tokens % 2).mean(axis=1, keepdims=True).astype("float32")

    def token_model(optimizer):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((10,), dtype="int32"), keras.layers.Embedding(50, 4),
                                  keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
        model.compile(optimizer, "mse")
        return model

    def dense_big_batches(model):
        for _ in range(2):
            for start in range(0, 256, 64):
                x_big, y_big = tokens[start:start + 64], targets[start:start + 64]
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(keras.losses.mean_squared_error(y_big, model(x_big)))
                gradients = tape.gradient(loss, model.trainable_variables)
                model.optimizer.apply_gradients(
                    zip([tf.convert_to_tensor(g) for g in gradients], model.trainable_variables))

    gaps = {}
    for name, make in {"Adam": lambda: keras.optimizers.Adam(0.01),
                       "SGD": lambda: keras.optimizers.SGD(0.5)}.items():
        fitted, exact, dense = (token_model(make()) for _ in range(3))
        fitted.fit(tokens, targets, batch_size=64, epochs=2, shuffle=False, verbose=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gaviz.AccumulationTrainer(exact, accumulation_steps=4).fit(
                tokens, targets, batch_size=16, epochs=2, shuffle=False, verbose=0)
        dense_big_batches(dense)
        gaps[name] = (max_difference(fitted, dense), max_difference(exact, fitted),
                      max_difference(dense, token_model(make())),
                      [w.category for w in caught if issubclass(w.category, UserWarning)])
    fit_gap, gaviz_gap, moved, said = gaps["Adam"]
    assert gaviz_gap < 1e-6 and fit_gap > moved > 1e-2, gaps  # 2.0e-01 against 0.079
    assert said == [], said
    fit_gap, gaviz_gap, moved, said = gaps["SGD"]
    assert gaviz_gap < 1e-6 and fit_gap < 1e-6 and moved > 0.1 and said == [], gaps


# ------------------------------------------------------------- the exercise


def _freeze_solution():
    import importlib
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
    return importlib.import_module("solutions.11_freeze").freeze_batch_normalization


def test_the_freeze_solution_passes():
    outcome = lesson11.freeze.evaluate(_freeze_solution())
    assert outcome.status == "pass", outcome.message
    assert "all 3 BatchNormalization layers frozen" in outcome.message


def test_the_freeze_stub_is_not_attempted():
    def freeze_batch_normalization(model):
        ...  # your code here

    assert lesson11.freeze.evaluate(freeze_batch_normalization).status == "not attempted"


def test_freezing_the_top_level_only_misses_the_nested_block():
    def freeze_batch_normalization(model):
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False

    outcome = lesson11.freeze.evaluate(freeze_batch_normalization)
    assert outcome.status == "fail", outcome
    assert "pretrained_block/block_normalization" in outcome.message
    assert "look inside every layer that has `.layers`" in outcome.message


def test_following_nested_models_one_level_deep_misses_the_deeper_one():
    """Issue #60: it passed, the check's model nesting once."""
    def freeze_batch_normalization(model):
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False
            elif hasattr(layer, "layers"):
                for inner in layer.layers:
                    if isinstance(inner, keras.layers.BatchNormalization):
                        inner.trainable = False

    outcome = lesson11.freeze.evaluate(freeze_batch_normalization)
    assert outcome.status == "fail", outcome
    assert "fine_tuned/pretrained_block/stem/stem_normalization still trains" in outcome.message
    assert "at every depth" in outcome.message


def test_a_layer_frozen_before_stays_frozen():
    def freeze_batch_normalization(model):
        for layer in model.layers:
            if hasattr(layer, "layers"):
                freeze_batch_normalization(layer)
            else:
                layer.trainable = not isinstance(layer, keras.layers.BatchNormalization)

    outcome = lesson11.freeze.evaluate(freeze_batch_normalization)
    assert outcome.status == "fail", outcome
    assert "stem_dense was frozen before" in outcome.message


def test_freezing_the_whole_model_is_a_fault():
    def freeze_batch_normalization(model):
        model.trainable = False

    outcome = lesson11.freeze.evaluate(freeze_batch_normalization)
    assert outcome.status == "fail" and "the whole model is frozen" in outcome.message


def test_freezing_a_dense_layer_too_is_named():
    def freeze_batch_normalization(model):
        _freeze_solution()(model)
        model.get_layer("head_dense").trainable = False

    outcome = lesson11.freeze.evaluate(freeze_batch_normalization)
    assert outcome.status == "fail" and "fine_tuned/head_dense is frozen too" in outcome.message


def test_a_momentum_change_is_not_a_freeze():
    def freeze_batch_normalization(model):
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = 0.0

    outcome = lesson11.freeze.evaluate(freeze_batch_normalization)
    assert outcome.status == "fail" and "every BatchNormalization layer still trains" in \
        outcome.message
