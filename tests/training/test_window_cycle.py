"""A window's cycle, its finish, judge, apply and reset phases, as exact values
(gaviz.training.window.window_cycle), and where its sums live between calls (WindowStore)."""

import keras
import numpy as np
import tensorflow as tf

from gaviz.gallery import pitfalls
from gaviz.training.loop.forward_backward import WeightPenalty
from gaviz.training.window import rules, window_cycle
from gaviz.training.window.arithmetic import WindowSums
from gaviz.training.window.window_cycle import WindowCycle
from gaviz.training.window.window_store import WindowStore

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
    cycle = WindowCycle(optimizer, lambda: model.trainable_variables, rule,
                        divides=normalize != "sum", penalty=WeightPenalty(model),
                        skipped_windows=skipped)
    return cycle, model


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
    assert not bool(update.apply(tf.constant(False), [tf.constant([[3.0]])], update.patterns([])))
    np.testing.assert_array_equal(model.get_weights()[0], [[1.0]])
    assert bool(update.apply(tf.constant(True), [tf.constant([[3.0]])], update.patterns([])))
    np.testing.assert_array_equal(model.get_weights()[0], [[1.0 - 3.0]])  # SGD, learning rate 1


def test_a_loss_scaling_optimizer_skips_an_overflowing_window_and_it_is_counted():
    update, model = make_update(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1.0)))
    # Under loss scaling only the loss must be finite: the scaled gradient may overflow.
    assert finish(update, gradient=float("inf"))[2] is True
    applied = update.apply(tf.constant(True), [tf.constant([[float("inf")]])],
                           update.patterns([]))
    assert not bool(applied)
    assert int(update.skipped_windows.numpy()) == 1
    np.testing.assert_array_equal(model.get_weights()[0], [[1.0]])


def test_a_window_is_judged_due_and_refused_by_the_first_reason_that_holds():
    cycle, _ = make_update()
    yes, no = tf.constant(True), tf.constant(False)

    def judged(due=yes, finite=yes, count=4.0, invalid=0.0, foreseen=yes):
        return int(cycle.judge(due, finite, tf.constant(count), tf.constant(invalid), foreseen))

    assert judged() == window_cycle.ACCEPTED
    assert judged(due=no, finite=no, count=0.0) == window_cycle.NOT_DUE
    assert judged(foreseen=no) == window_cycle.UNFORESEEN_GRADIENTS
    assert judged(finite=no, foreseen=no) == window_cycle.NOT_FINITE
    assert judged(count=0.0, finite=no) == window_cycle.BAD_COUNT
    assert judged(invalid=1.0) == window_cycle.BAD_COUNT


def test_the_patterns_are_every_union_of_those_seen_each_with_the_penalty():
    """Which variables an update may step: decided here for the trainer (one
    traced micro-step) and the Accumulator (the micro-steps traced so far)."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    cycle = WindowCycle(keras.optimizers.SGD(1.0), lambda: model.trainable_variables)
    assert cycle.patterns([]) == [(0, 1, 2, 3)]  # nothing traced yet: every variable
    assert cycle.patterns([frozenset({0, 1})]) == [(0, 1)]
    assert cycle.patterns([frozenset({0}), frozenset({2})]) == [(0,), (0, 2), (2,)]
    cycle.penalty = type("Penalty", (), {"reaches": staticmethod(lambda: frozenset({3}))})()
    assert cycle.patterns([frozenset({0})]) == [(0, 3)]


def test_the_chosen_pattern_is_the_windows_own_or_none_of_them():
    patterns = [(0,), (0, 2), (2,)]
    chosen = WindowCycle.chosen
    assert int(chosen(patterns, tf.constant([True, False, True]))) == 1
    assert int(chosen(patterns, tf.constant([False, False, True]))) == 2
    assert int(chosen(patterns, tf.constant([False, True, False]))) == len(patterns)
    assert int(chosen([(0, 1)])) == 0  # the trainer's one pattern


def test_finite_reads_the_gradient_only_without_a_loss_scale():
    plain, _ = make_update()
    scaled, _ = make_update(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1.0)))
    for cycle, expected in ((plain, False), (scaled, True)):
        assert bool(cycle.finite(tf.constant(1.0), lambda: tf.constant(False))) is expected
        assert not bool(cycle.finite(tf.constant(float("nan")), lambda: tf.constant(True)))


def test_closing_runs_no_conditional_where_every_window_closes():
    assert window_cycle.closing(True, lambda: "closed", None) == "closed"
    opened = window_cycle.closing(tf.constant(False), lambda: tf.constant(1), lambda: tf.constant(2))
    assert int(opened) == 2


def test_an_update_steps_only_its_pattern_and_hands_the_rest_as_none():
    """The trainer hands Keras a None for a variable left out (Model.fit's warning);
    the Accumulator hands only the others."""
    for hands_left_out in (True, False):
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False),
                                  keras.layers.Dense(1, use_bias=False)])
        optimizer = keras.optimizers.SGD(1.0)
        cycle = WindowCycle(optimizer, lambda m=model: m.trainable_variables,
                            hands_left_out=hands_left_out)
        before = [w.copy() for w in model.get_weights()]
        cycle.apply(tf.constant(True), [tf.ones((1, 1)), tf.ones((1, 1))], patterns=[(1,)])
        after = model.get_weights()
        assert np.array_equal(before[0], after[0]) and not np.array_equal(before[1], after[1])


def test_a_store_keeps_a_window_between_calls_and_resets_it():
    store = WindowStore(tf.distribute.get_strategy())
    variables = [tf.Variable(tf.ones((2, 3))), tf.Variable(tf.ones(3, dtype=tf.float64))]
    assert float(store.read(variables).loss_sum) == 0.0  # nothing kept before it is built
    store.build(variables)
    assert [s.dtype for s in store.gradient_sums] == [tf.float32, tf.float64]
    micro = WindowSums([tf.fill((2, 3), 2.0), tf.fill([3], tf.constant(3.0, tf.float64))],
                       tf.constant(5.0), tf.constant(7.0), tf.constant(7.0), tf.constant(4.0))
    store.add(micro, invalid=1.0, reached=tf.constant([True, False]))
    store.add(micro)
    kept = store.read()
    assert [float(tf.reduce_sum(g)) for g in kept.gradients] == [24.0, 18.0]
    assert [float(v) for v in kept[1:]] == [10.0, 14.0, 14.0, 8.0]
    assert int(store.micro_steps.numpy()) == 2 and float(store.invalid_counts.numpy()) == 1.0
    assert store.had_gradient.numpy().tolist() == [True, False]
    store.reset(tf.nest.map_structure(tf.zeros_like, kept))
    assert int(store.micro_steps.numpy()) == 0 and not store.had_gradient.numpy().any()
    assert float(store.invalid_counts.numpy()) == 0.0
