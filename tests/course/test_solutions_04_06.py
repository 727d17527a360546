"""The solutions of lessons 04-06 do what their exercises ask, checked independently."""

import importlib
import pathlib
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

from helpers import make_mlp
from reference import dataset_of, group_windows, micro_batches, train_big_batches

import gaviz
from gaviz.gallery.measure import flat_weights as flat

reset_solution = importlib.import_module("solutions.04_reset")
growth_solution = importlib.import_module("solutions.04_update_norms_grow")
normalization_solution = importlib.import_module("solutions.05_window_loss")
tail_solution = importlib.import_module("solutions.06_window_sizes")

K = 3


# ------------------------------------------------------------- 04: reset


def test_reset_zeroes_every_accumulator_in_place():
    rng = np.random.default_rng(0)
    accumulators = [
        tf.Variable(rng.normal(size=shape).astype(dtype))
        for shape, dtype in [((), "float32"), ((3,), "float32"), ((2, 4), "float64")]
    ]
    originals = list(accumulators)
    assert reset_solution.reset(accumulators) is None
    for accumulator, original, shape, dtype in zip(
        accumulators, originals, [(), (3,), (2, 4)], [tf.float32, tf.float32, tf.float64]
    ):
        assert accumulator is original
        assert tuple(accumulator.shape) == shape and accumulator.dtype == dtype
        assert not np.any(accumulator.numpy())


def test_reset_makes_the_hand_loop_equal_big_batches(regression_data):
    """The lesson's loop with `reset` after each update lands on plain big-batch training."""
    x, y = regression_data
    x, y = x[:96], y[:96]
    micro = micro_batches(x, y, [8] * 12)  # 4 windows of K=3 micro-batches

    model = make_mlp()
    variables = model.trainable_variables
    optimizer = keras.optimizers.SGD(0.1)
    accumulators = [tf.Variable(tf.zeros(v.shape)) for v in variables]
    for step, (xm, ym) in enumerate(micro, start=1):
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(ym, model(xm)) / K
        for accumulator, grad in zip(accumulators, tape.gradient(loss, variables)):
            accumulator.assign_add(grad)
        if step % K == 0:
            optimizer.apply_gradients(zip(accumulators, variables))
            reset_solution.reset(accumulators)

    reference = make_mlp()
    windows = group_windows(micro, K, "flush", epochs=1)
    train_big_batches(reference, keras.optimizers.SGD(0.1), keras.losses.mean_squared_error, windows)
    assert np.max(np.abs(flat(model) - flat(reference))) < 1e-5
    assert np.linalg.norm(flat(model) - flat(make_mlp())) > 1e-2  # it did train


def test_update_norms_grow_on_hand_made_sequences():
    grow = growth_solution.update_norms_grow
    assert grow([1.0, 2.0, 3.0, 4.0, 5.0]) is True
    assert grow([1.0, 0.9, 0.7, 0.7]) is False  # a healthy run's updates shrink
    assert grow([1.0, 1.5, 1.9]) is False  # rising, but not twice the first
    assert grow([1.0, 3.0, 2.5, 4.0]) is False  # not rising every time
    assert grow([1.0, 1.5, 1.9], factor=1.5) is True
    with pytest.raises(ValueError, match="norms"):
        grow([1.0])


def test_update_norms_grow_flags_missing_reset_and_not_exact(regression_data):
    x, y = regression_data
    data = dataset_of(micro_batches(x[:96], y[:96], [8] * 12))
    result = gaviz.compare_with_exact(
        gaviz.PITFALLS["missing_reset"], make_mlp, lambda: keras.optimizers.SGD(1e-3), "mse", data, K
    )
    assert growth_solution.update_norms_grow(result.update_norms) is True
    assert growth_solution.update_norms_grow(result.exact_update_norms) is False


# ------------------------------------------------------ 05: normalization


def test_window_loss_is_the_big_batch_mean_for_ragged_micro_batches():
    rng = np.random.default_rng(1)
    losses = [rng.exponential(size=n) for n in (2, 30, 5, 11)]
    expected = float(np.mean(np.concatenate(losses)))
    got = normalization_solution.window_loss(losses, None)
    assert got == pytest.approx(expected, rel=1e-12)
    ones = [np.ones(len(loss)) for loss in losses]
    assert normalization_solution.window_loss(losses, ones) == pytest.approx(expected)
    # The exercise's point: the mean of means is a different number here.
    mean_of_means = float(np.mean([np.mean(loss) for loss in losses]))
    assert abs(mean_of_means - expected) > 0.01 * expected
    assert normalization_solution.mean_of_means(losses) == pytest.approx(mean_of_means)


def test_window_loss_with_token_masks_is_total_loss_over_real_tokens():
    x, y, mask = gaviz.demo.make_token_data(sequences=12, seed=3)
    model = gaviz.demo.make_token_model()
    per_token = keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True).numpy()
    bounds = [0, 2, 7, 12]  # ragged micro-batches of 2, 5 and 5 sequences
    losses = [per_token[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    weights = [mask[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    expected = float(tf.reduce_sum(per_token * mask) / tf.reduce_sum(mask))
    assert normalization_solution.window_loss(losses, weights) == pytest.approx(expected, rel=1e-6)
    assert abs(normalization_solution.mean_of_means(losses, weights) - expected) > 1e-3


def test_window_loss_broadcasts_per_sequence_weights():
    losses = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0, 6.0]])]
    weights = [np.array([1.0, 0.0]), np.array([2.0])]
    # Weighted tokens: 1 + 2 (weight 1) and 5 + 6 (weight 2) over total weight 2 + 4.
    assert normalization_solution.window_loss(losses, weights) == pytest.approx((3.0 + 22.0) / 6.0)


def test_window_loss_matches_the_exact_trainers_reported_loss(regression_data):
    x, y = regression_data
    w = np.random.default_rng(2).uniform(0.5, 2.0, size=len(x)).astype("float32")
    sizes = [2, 30, 5]
    micro = micro_batches(x[:37], y[:37], sizes, w[:37])
    model = make_mlp()
    losses = [keras.losses.mean_squared_error(ym, model(xm)).numpy() for xm, ym, _ in micro]
    history = gaviz.AccumulationTrainer(
        model, keras.optimizers.SGD(0.1), "mse", K, normalize="weights"
    ).fit(dataset_of(micro))
    got = normalization_solution.window_loss(losses, [wm for _, _, wm in micro])
    assert history.loss[0] == pytest.approx(got, rel=1e-5)


# --------------------------------------------------------------- 06: tail


@pytest.mark.parametrize("num_samples,micro_batch_size,accumulation_steps",
                         [(50, 8, 3), (64, 8, 4), (70, 8, 3)])
def test_window_sizes_match_the_trainers_histories(regression_data, num_samples, micro_batch_size,
                                                   accumulation_steps):
    x, y = regression_data
    data = tf.data.Dataset.from_tensor_slices((x[:num_samples], y[:num_samples])).batch(micro_batch_size)
    for tail in ("flush", "drop", "carry"):
        trainer = gaviz.AccumulationTrainer(
            make_mlp(), keras.optimizers.SGD(0.01), "mse", accumulation_steps, tail=tail
        )
        history = trainer.fit(data, epochs=2)
        got = tail_solution.window_sizes(num_samples, micro_batch_size, accumulation_steps, tail, epochs=2)
        assert got == history.samples, tail


def test_window_sizes_match_the_reference_grouping_on_a_grid():
    for num_samples in (1, 7, 24, 25, 31, 100):
        for micro_batch_size in (1, 4, 8):
            for accumulation_steps in (1, 2, 3, 5):
                for tail in ("flush", "drop", "carry"):
                    for epochs in (1, 3):
                        full, rest = divmod(num_samples, micro_batch_size)
                        sizes = [micro_batch_size] * full + ([rest] if rest else [])
                        micro = [(np.zeros(n),) for n in sizes]
                        expected = [len(w[0]) for w in group_windows(micro, accumulation_steps, tail, epochs)]
                        got = tail_solution.window_sizes(
                            num_samples, micro_batch_size, accumulation_steps, tail, epochs=epochs
                        )
                        assert got == expected, (num_samples, micro_batch_size, accumulation_steps,
                                                 tail, epochs)


def test_window_sizes_hand_worked_cases():
    sizes = tail_solution.window_sizes
    assert sizes(900, 32, 8, "flush", epochs=2) == [256, 256, 256, 132] * 2
    assert sizes(900, 32, 8, "drop", epochs=2) == [256] * 6
    assert sizes(900, 32, 8, "carry", epochs=2) == [256, 256, 256, 228, 256, 256, 256]
    assert sizes(1000, 32, 8, "drop") == [256, 256, 256, 232]  # 32 micro-batches: no partial window
    assert sizes(100, 10, 3, "flush") == [30, 30, 30, 10]
    with pytest.raises(ValueError, match="tail"):
        sizes(100, 10, 3, "keep")
