"""Token-level normalization, and what accumulation cannot do for BatchNormalization."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_weights, start_of

import gaviz
from gaviz import demo
from gaviz.gallery.batchnorm import batch_dependence

K, MICRO = 3, 4
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def token_dataset(x, y, mask):
    return tf.data.Dataset.from_tensor_slices((x, y, mask)).batch(MICRO)


def token_mean_reference(x, y, mask, epochs):
    """Big batches of K*MICRO sequences, loss averaged over their real tokens."""
    model = demo.make_token_model()
    optimizer = keras.optimizers.Adam(0.05)
    big = K * MICRO
    for _ in range(epochs):
        for start in range(0, len(x), big):
            xb, yb, mb = x[start:start + big], y[start:start + big], mask[start:start + big]
            with tf.GradientTape() as tape:
                per_token = LOSS.call(yb, model(xb, training=True))
                loss = tf.reduce_sum(per_token * mb) / tf.reduce_sum(mb)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return model


def test_normalize_weights_averages_over_real_tokens():
    x, y, mask = demo.make_token_data(sequences=60)
    model = demo.make_token_model()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(
        model, keras.optimizers.Adam(0.05), LOSS, K, normalize="weights"
    )
    history = trainer.fit(token_dataset(x, y, mask), epochs=2)
    reference = token_mean_reference(x, y, mask, epochs=2)
    big = K * MICRO  # a per-token loss: the terms are a window's real tokens
    tokens = max(int(mask[i:i + big].sum()) for i in range(0, len(x), big))
    assert_same_weights(model, reference, start, terms=tokens)
    assert history.loss[-1] < history.loss[0]


def test_mean_of_means_is_off_for_variable_token_counts():
    x, y, mask = demo.make_token_data(sequences=60)
    # Sorted by length, as bucketing does: micro-batches of short sequences
    # carry few tokens, yet the mean of means weighs them like long ones.
    order = np.argsort(mask.sum(axis=1), kind="stable")
    x, y, mask = x[order], y[order], mask[order]
    ds = token_dataset(x, y, mask)
    result = gaviz.compare_with_exact(
        gaviz.PITFALLS["mean_of_means"], demo.make_token_model, lambda: keras.optimizers.SGD(0.5),
        LOSS, ds, K, normalize="weights",
    )
    assert result.first_update_relative_error > 0.1  # measured: 0.17
    # With every token real (equal token counts) the mean of means is exact.
    full = np.ones_like(mask)
    equal = gaviz.compare_with_exact(
        gaviz.PITFALLS["mean_of_means"], demo.make_token_model, lambda: keras.optimizers.SGD(0.5),
        LOSS, token_dataset(x, y, full), K, normalize="weights",
    )
    assert equal.first_update_relative_error < 1e-4


def test_token_data_is_padded_and_deterministic():
    x, y, mask = demo.make_token_data(sequences=20, seed=1)
    x2, _, mask2 = demo.make_token_data(sequences=20, seed=1)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(mask, mask2)
    lengths = mask.sum(axis=1)
    assert lengths.min() >= 1 and lengths.max() <= 12 and len(set(lengths)) > 3
    assert np.all(x[mask == 0] == 0)


def test_batch_normalization_differs_from_the_big_batch():
    result = batch_dependence("batch", accumulation_steps=4, micro_batch_size=8)
    assert result.update_relative_difference > 0.05
    assert result.moving_statistics_difference > 1e-3


@pytest.mark.parametrize("normalization", ["layer", "group", "none"])
def test_per_sample_normalization_accumulates_exactly(normalization):
    result = batch_dependence(normalization, accumulation_steps=4, micro_batch_size=8)
    assert result.update_relative_difference < 1e-4
    assert result.moving_statistics_difference is None


def test_unknown_normalization():
    with pytest.raises(ValueError, match="`normalization` must be one of"):
        batch_dependence("instance")


def test_a_trainer_for_a_model_with_batch_normalization_says_so_once_by_name():
    import warnings

    model = gaviz.gallery.batchnorm.make_normalized_model("batch")
    bn = next(layer.name for layer in model.layers if "batch_normalization" in layer.name)
    with pytest.warns(UserWarning, match=rf"BatchNormalization layers \({bn}\).*batch_dependence") as caught:
        trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.1), "mse", 4)
        x, y = gaviz.demo.make_data(64)
        trainer.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert len([w for w in caught if "BatchNormalization" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # it points at the line that made the trainer
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none for k = 1, a frozen layer, or no such layer
        gaviz.AccumulationTrainer(gaviz.gallery.batchnorm.make_normalized_model("batch"),
                                  keras.optimizers.SGD(0.1), "mse", 1)
        frozen = gaviz.gallery.batchnorm.make_normalized_model("batch")
        frozen.layers[1].trainable = False
        gaviz.AccumulationTrainer(frozen, keras.optimizers.SGD(0.1), "mse", 4)
        gaviz.AccumulationTrainer(gaviz.gallery.batchnorm.make_normalized_model("layer"),
                                  keras.optimizers.SGD(0.1), "mse", 4)
        gaviz.batch_dependence("batch", accumulation_steps=2, micro_batch_size=4)


class RunningMean(keras.layers.Layer):
    """A layer that updates its own state on every training call."""

    def build(self, shape):
        self.mean = self.add_weight(shape=(shape[-1],), initializer="zeros", trainable=False)

    def call(self, x, training=None):
        if training:
            self.mean.assign(0.9 * self.mean + 0.1 * keras.ops.mean(x, axis=0))
        return x - self.mean


def state_model(layer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), layer, keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def test_a_layer_updating_its_own_state_is_warned_about_once():
    x = np.random.default_rng(0).normal(size=(20, 3)).astype("float32")
    trainer = gaviz.AccumulationTrainer(state_model(RunningMean()), accumulation_steps=2)
    with pytest.warns(UserWarning, match=r"updates non-trainable variables while it trains "
                                         r"\(sequential.*running_mean.*\)"):
        trainer.fit(x, x[:, :1], batch_size=5, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.fit(x, x[:, :1], batch_size=5, verbose=0)  # once per trainer


@pytest.mark.parametrize("layer", [keras.layers.Dropout(0.3), keras.layers.GaussianNoise(0.1),
                                   keras.layers.LayerNormalization()])
def test_random_and_stateless_layers_are_not_warned_about(layer):
    x = np.random.default_rng(0).normal(size=(20, 3)).astype("float32")
    trainer = gaviz.AccumulationTrainer(state_model(layer), accumulation_steps=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.fit(x, x[:, :1], batch_size=5, verbose=0)
