"""A window's finish and update phases, as exact values (gaviz.training.window_update)."""

from types import SimpleNamespace

import keras
import numpy as np
import tensorflow as tf

from gaviz.gallery import pitfalls
from gaviz.training import rules
from gaviz.training.window import WindowSums
from gaviz.training.window_update import WindowUpdate

# A kernel of 1 under L2(0.5): penalty 0.5 * 1**2 = 0.5, its gradient 2 * 0.5 * 1 = 1.
PENALTY, PENALTY_GRAD = 0.5, 1.0


def one_weight_model():
    return keras.Sequential([
        keras.Input((1,)),
        keras.layers.Dense(1, use_bias=False, kernel_initializer="ones",
                           kernel_regularizer=keras.regularizers.L2(0.5)),
    ])


def make_update(optimizer=None, rule=rules.EXACT, normalize="samples"):
    model = one_weight_model()
    optimizer = optimizer or keras.optimizers.SGD(1.0)
    optimizer.build(model.trainable_variables)
    skipped = tf.Variable(0, dtype=tf.int64)
    makes_loss = SimpleNamespace(normalize=normalize, includes_weight_penalty=False)
    update = WindowUpdate(model, optimizer, makes_loss, rule, skipped)
    return update, model


def totals(gradient=8.0, loss_sum=12.0, samples=4.0):
    """A window of 4 samples whose summed loss is 12 and summed gradient 8."""
    return WindowSums([tf.constant([[gradient]])], tf.constant(loss_sum),
                      tf.constant(samples), tf.constant(samples), tf.constant(samples))


def finish(update, steps=3, k=4, **sums):
    loss, (grad,), finite = update.finish(totals(**sums), tf.constant(steps, tf.int64),
                                          tf.constant(k, tf.int64))
    return float(loss), float(grad.numpy().squeeze()), bool(finite)


def test_the_window_is_divided_once_and_the_penalty_counts_once():
    update, _ = make_update()
    assert finish(update) == (12 / 4 + PENALTY, 8 / 4 + PENALTY_GRAD, True)


def test_a_sum_reduction_divides_by_nothing():
    update, _ = make_update(normalize="sum")
    assert finish(update) == (12 + PENALTY, 8 + PENALTY_GRAD, True)


def test_the_penalty_pitfall_counts_it_once_per_micro_step():
    update, _ = make_update(rule=pitfalls.RegularizerEveryMicroStep.rule)
    assert finish(update, steps=3) == (3 + 3 * PENALTY, 2 + 3 * PENALTY_GRAD, True)


def test_the_under_scaled_tail_divides_a_partial_window_as_a_full_one():
    # 2 of k = 4 micro-batches holding 2 samples, divided by the 4 a full window would hold:
    # the data part is m / k = 1/2 of the exact 8 / 2; the penalty is untouched.
    exact, _ = make_update()
    assert finish(exact, steps=2, samples=2.0) == (12 / 2 + PENALTY, 8 / 2 + PENALTY_GRAD, True)
    update, _ = make_update(rule=pitfalls.UnderScaledTail.rule)
    assert finish(update, steps=2, samples=2.0) == (12 / 4 + PENALTY, 8 / 4 + PENALTY_GRAD, True)


def test_a_non_finite_gradient_is_reported_not_finite():
    update, _ = make_update()
    assert finish(update, gradient=float("inf"))[2] is False


def test_update_applies_only_when_asked():
    update, model = make_update()
    assert not bool(update.update(tf.constant(False), [tf.constant([[3.0]])]))
    np.testing.assert_array_equal(model.get_weights()[0], [[1.0]])
    assert bool(update.update(tf.constant(True), [tf.constant([[3.0]])]))
    np.testing.assert_array_equal(model.get_weights()[0], [[1.0 - 3.0]])  # SGD, learning rate 1


def test_a_loss_scaling_optimizer_skips_an_overflowing_window_and_it_is_counted():
    update, model = make_update(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1.0)))
    # Under loss scaling only the loss must be finite: the scaled gradient may overflow.
    assert finish(update, gradient=float("inf"))[2] is True
    applied = update.update(tf.constant(True), [tf.constant([[float("inf")]])])
    assert not bool(applied)
    assert int(update.skipped_windows.numpy()) == 1
    np.testing.assert_array_equal(model.get_weights()[0], [[1.0]])
