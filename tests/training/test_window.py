"""The window's arithmetic and the rules, as exact values (optax's and Keras's style)."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from gaviz.gallery.pitfalls import full_window_divisor, mean_contribution, no_divisor, once_per_micro_step
from gaviz.training.window import arithmetic, rules, verdicts
from gaviz.training.window.arithmetic import WindowResult, WindowSums


def sums(grads, loss_sum, count, normalizer=None):
    return WindowSums([tf.constant(g, tf.float32) for g in grads], tf.constant(float(loss_sum)),
                      tf.constant(float(count)),
                      tf.constant(float(count if normalizer is None else normalizer)))


def test_gradients_1_2_3_4_average_to_exactly_2_5():
    variables = [tf.Variable(0.0)]
    total = arithmetic.zeros(variables)
    for g in (1.0, 2.0, 3.0, 4.0):
        total = arithmetic.add(total, sums([g], g, 1))
    (grad,) = arithmetic.divide(total.gradients, total.normalizer)
    assert grad.numpy() == 2.5
    assert total.loss_sum.numpy() == 10.0 and total.sample_count.numpy() == 4.0


def test_ragged_micro_batches_divide_once_by_the_window_count():
    # 1 sample with gradient 10, then 3 samples with gradient 2 each (sum 6):
    # the big batch's mean is 16 / 4 = 4; the mean of means would be (10 + 2) / 2 = 6.
    total = arithmetic.add(arithmetic.add(arithmetic.zeros([tf.Variable(0.0)]), sums([10.0], 0, 1)),
                       sums([6.0], 0, 3))
    assert arithmetic.divide(total.gradients, total.normalizer)[0].numpy() == 4.0


def test_an_empty_window_gives_zeros_not_nan():
    variables = [tf.Variable(tf.ones((2, 3))), tf.Variable(tf.ones((3,), tf.float64))]
    empty = arithmetic.zeros(variables)
    assert [g.dtype for g in empty.gradients] == [tf.float32, tf.float64]
    grads = arithmetic.divide(empty.gradients, empty.normalizer)
    for g in grads:
        np.testing.assert_array_equal(g.numpy(), 0.0)
    assert arithmetic.all_finite(empty.loss_sum, grads).numpy()


def test_float16_gradients_are_summed_in_float32():
    total = arithmetic.zeros([tf.Variable(tf.zeros((1,), tf.float16))])
    tiny = tf.constant([1e-4], tf.float16)
    for _ in range(2048):  # in float16, 0.2 + 1e-4 rounds back to about 0.2
        total = arithmetic.add(total, WindowSums([tiny], 0.0, 1.0, 1.0))
    assert total.gradients[0].dtype == tf.float32
    np.testing.assert_allclose(total.gradients[0].numpy(), 2048 * float(tiny.numpy()[0]), rtol=1e-4)


def test_regularization_gradient_is_added_after_the_division():
    (grad,) = arithmetic.divide([tf.constant(8.0)], tf.constant(4.0), [tf.constant(0.5)])
    assert grad.numpy() == 2.5


def test_non_finite_values_are_found():
    assert not arithmetic.all_finite(tf.constant(1.0), [tf.constant([0.0, np.inf])]).numpy()
    assert not arithmetic.all_finite(tf.constant(np.nan), [tf.constant([0.0])]).numpy()


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, None])
def test_non_finite_values_are_found_inside_a_graph(jit_compile, dtype, bad):
    # Checked where the trainer runs it, in a tf.function (Grappler) and under
    # XLA, on known shapes: a graph optimizer that rewrote the test (as one
    # rewrote sum(g * 0) under TensorFlow 2.16.2) would hide every NaN.
    values = np.ones((3, 4), dtype)
    if bad is not None:
        values[1, 2] = bad
    variable = tf.Variable(values)

    @tf.function(jit_compile=jit_compile)
    def finite():
        return arithmetic.all_finite(tf.constant(1.0), [variable * 2, tf.ones((5,), dtype)])

    assert bool(finite()) is (bad is None)


def test_window_result_packs_into_one_row_and_back():
    result = WindowResult(True, verdicts.NOT_FINITE, True, 0.25, 96.0, 3, 2, 4)
    row = tf.stack([result.pack(), result.pack()]).numpy()[1]
    assert row.dtype == np.float64
    assert WindowResult.read(row) == result
    assert isinstance(WindowResult.read(row).micro_steps, int)
    assert WindowResult.read(row).due
    assert not WindowResult.read(result._replace(verdict=verdicts.NOT_DUE).pack().numpy()).due


# ------------------------------------------------------------------- rules

def test_exact_rule_sums_and_divides_by_the_count():
    micro = sums([6.0], 6.0, 3, normalizer=2.0)
    assert rules.EXACT.contribution(micro) is micro
    assert rules.EXACT.divisor(tf.constant(7.0), 2, 4).numpy() == 7.0
    assert rules.EXACT.penalty_times(3).numpy() == 1.0
    assert not rules.EXACT.clip_micro_batches


def test_pitfall_rules_give_their_own_numbers():
    mean = mean_contribution(sums([6.0], 9.0, 3))
    assert (mean.gradients[0].numpy(), mean.loss_sum.numpy(), mean.normalizer.numpy()) == (2.0, 3.0, 1.0)
    assert no_divisor(tf.constant(12.0), 4, 4).numpy() == 1.0
    # A partial window of 1 micro-batch of 8 samples, k=4: divided as if it held 32.
    divisor = full_window_divisor(tf.constant(8.0), tf.constant(1, tf.int64), tf.constant(4, tf.int64))
    assert divisor.numpy() == 32.0
    assert once_per_micro_step(tf.constant(3, tf.int64)).numpy() == 3.0


def test_a_rule_is_frozen_data():
    with pytest.raises(dataclasses.FrozenInstanceError):
        rules.EXACT.divisor = no_divisor
    assert rules.Rule(divisor=no_divisor) != rules.EXACT
