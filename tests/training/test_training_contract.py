"""Counters, schedules, clipping, failures, tracing, checkpoints and callbacks."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import PIPELINES, assert_same_weights, make_mlp, start_of
from reference import (
    dataset_of,
    group_windows,
    max_weight_difference,
    micro_batches,
    train_big_batches,
)

import gaviz

MSE = keras.losses.mean_squared_error


@pytest.fixture
def micro(regression_data):
    x, y = regression_data
    return micro_batches(x, y, [8] * 12 + [4])  # 13 micro-batches


def test_counters_count_updates_and_micro_steps(micro):
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 4)
    history = trainer.fit(dataset_of(micro), epochs=2)
    assert len(history) == 8  # 3 full windows and 1 flushed tail, twice
    assert int(trainer.optimizer.iterations.numpy()) == 8
    assert int(trainer.micro_step.numpy()) == 26
    assert int(trainer.micro_steps_in_window.numpy()) == 0
    assert history.micro_steps == [4, 4, 4, 1] * 2
    assert history.update_epochs == [1] * 4 + [2] * 4
    assert history.samples_seen[-1] == 200
    assert trainer.effective_batch_size(8) == 32


def test_learning_rate_schedule_reads_updates(micro):
    def schedule():
        return keras.optimizers.schedules.PiecewiseConstantDecay([3], [0.2, 0.02])

    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(schedule()), "mse", 4)
    trainer.fit(dataset_of(micro), epochs=2)
    reference = make_mlp()
    train_big_batches(
        reference, keras.optimizers.SGD(schedule()), MSE, group_windows(micro, 4, "flush", 2)
    )
    assert_same_weights(model, reference, start, terms=4 * 8)
    # A schedule reading micro-steps would have decayed after the first window.
    constant = make_mlp()
    train_big_batches(
        constant, keras.optimizers.SGD(0.2), MSE, group_windows(micro, 4, "flush", 2)
    )
    assert max_weight_difference(model, constant) > 1e-3


def test_clipping_applies_to_the_accumulated_gradient(micro):
    model = make_mlp()
    start = start_of(model)
    optimizer = keras.optimizers.SGD(0.5, global_clipnorm=0.05)
    trainer = gaviz.AccumulationTrainer(model, optimizer, "mse", 4)
    trainer.fit(dataset_of(micro), epochs=1)
    windows = group_windows(micro, 4, "flush", 1)
    reference = make_mlp()
    train_big_batches(reference, keras.optimizers.SGD(0.5, global_clipnorm=0.05), MSE, windows)
    assert_same_weights(model, reference, start, terms=4 * 8)
    unclipped = make_mlp()
    train_big_batches(unclipped, keras.optimizers.SGD(0.5), MSE, windows)
    assert max_weight_difference(model, unclipped) > 1e-3


class TwoHeads(keras.Model):
    """A model with a layer the loss never reaches."""

    def __init__(self):
        super().__init__()
        self.used = keras.layers.Dense(1)
        self.unused = keras.layers.Dense(1)

    def build(self, input_shape):
        self.used.build(input_shape)
        self.unused.build(input_shape)

    def call(self, x):
        return self.used(x)


def make_two_heads():
    keras.utils.set_random_seed(5)
    model = TwoHeads()
    model.build((None, 5))
    return model


def test_unreached_variables_get_zero_gradients(micro):
    model = make_two_heads()
    start = start_of(model)
    before = [w.copy() for w in model.unused.get_weights()]
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.05), "mse", 4)
    trainer.fit(dataset_of(micro), epochs=2)
    reference = make_two_heads()
    train_big_batches(
        reference, keras.optimizers.Adam(0.05), MSE, group_windows(micro, 4, "flush", 2)
    )
    assert_same_weights(model, reference, start, terms=4 * 8)
    for b, a in zip(before, model.unused.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_non_finite_loss_stops_before_the_update(micro):
    poisoned = list(micro)
    x, y = poisoned[9]
    poisoned[9] = (np.full_like(x, np.nan), y)  # micro-batch 10: window 3 when k=4
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", 4)
    seen = []
    with pytest.raises(FloatingPointError, match=r"Update 3 \(epoch 1\)"):
        trainer.fit(dataset_of(poisoned), on_update=seen.append)
    assert len(seen) == 2
    assert int(trainer.optimizer.iterations.numpy()) == 2
    reference = make_mlp()
    train_big_batches(
        reference, keras.optimizers.Adam(0.01), MSE, group_windows(micro, 4, "flush", 1)[:2]
    )
    assert_same_weights(model, reference, start, terms=4 * 8)
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    # The bad window was discarded; the trainer can go on with clean data.
    assert int(trainer.micro_steps_in_window.numpy()) == 0
    trainer.fit(dataset_of(micro))
    assert int(trainer.optimizer.iterations.numpy()) == 6


def test_one_trace_for_all_windows_epochs_and_tails(regression_data):
    x, y = regression_data
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 3)
    ragged = dataset_of(micro_batches(x, y, [3, 17, 5, 9, 1, 20, 13, 2, 30]))
    trainer.fit(ragged, epochs=3)
    # Iterated, as the ragged one is (slices batched would be cut like arrays).
    trainer.fit(PIPELINES["iterated"](tf.data.Dataset.from_tensor_slices((x, y)).batch(7)),
                epochs=2)
    assert trainer.tracing_count == 1


def test_checkpoint_mid_window_resumes_exactly(micro, tmp_path):
    ds = dataset_of(micro)  # 13 micro-batches, k=5: 3 carried into epoch 2

    def fresh():
        return gaviz.AccumulationTrainer(
            make_mlp(), keras.optimizers.Adam(0.01), "mse", 5, tail="carry"
        )

    uninterrupted = fresh()
    start = start_of(uninterrupted.model)
    uninterrupted.fit(ds, epochs=2)

    first = fresh()
    first.fit(ds, epochs=1)
    assert int(first.micro_steps_in_window.numpy()) == 3
    path = tf.train.Checkpoint(trainer=first).save(str(tmp_path / "ckpt"))

    resumed = fresh()
    tf.train.Checkpoint(trainer=resumed).restore(path).assert_consumed()
    assert int(resumed.micro_steps_in_window.numpy()) == 3
    resumed.fit(ds, epochs=1)
    assert_same_weights(resumed.model, uninterrupted.model, start, terms=5 * 8)
    assert int(resumed.optimizer.iterations.numpy()) == 5
    # Without the carried window the run would differ: the test can fail.
    # (Everything restored, then the carried window emptied.)
    lost = fresh()
    tf.train.Checkpoint(trainer=lost).restore(path).assert_consumed()
    assert int(lost.optimizer.iterations.numpy()) == 2
    lost.state.micro_steps_in_window.assign(0)
    carried = lost.state.window
    for variable in [*lost.carried_sums, carried.loss_sum, carried.sample_count,
                     carried.normalizer, carried.rows]:
        variable.assign(tf.zeros_like(variable))
    lost.fit(ds, epochs=1)
    with pytest.raises(AssertionError, match="weights differ beyond float rounding"):
        assert_same_weights(lost.model, uninterrupted.model, start, terms=5 * 8)


def test_callback_sees_each_update_and_can_stop(micro):
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2)
    seen = []

    def on_update(update):
        seen.append(update)
        if update.update == 3:
            trainer.stop_training = True

    history = trainer.fit(dataset_of(micro), epochs=5, on_update=on_update)
    assert [u.update for u in seen] == [1, 2, 3]
    assert history.updates == seen
    assert int(trainer.optimizer.iterations.numpy()) == 3
    assert seen[0].samples == 16 and seen[0].micro_steps == 2
    assert seen[2].samples_seen == 48
    assert seen[0].seconds <= seen[2].seconds


def test_a_loss_added_as_a_sum_over_rows_is_said_to_be_inexact(regression_data):
    """An add_loss that sums over rows cannot be accumulated exactly: said once, by
    name, at the first fit, with how to make it a mean; activity regularizers (means
    already) need no word."""
    import warnings

    class AddsTheSum(keras.layers.Layer):
        def call(self, x):
            self.add_loss(1e-3 * tf.reduce_sum(tf.square(x)))
            return x

    x, y = regression_data
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), AddsTheSum(name="adds"),
                              keras.layers.Dense(1)])
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.1), "mse", 4)
    with pytest.warns(gaviz.InexactAddedLoss,
                      match=r"added with add_loss by adds is not a mean over the batch's rows.*"
                            r"divide it by the batch's rows") as caught:
        trainer.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert len([w for w in caught if "add_loss" in str(w.message)]) == 1
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        regularized = make_mlp(activity_regularizer=keras.regularizers.L2(0.01))
        gaviz.AccumulationTrainer(regularized, keras.optimizers.SGD(0.1), "mse", 4).fit(
            x, y, batch_size=8, verbose=0)
