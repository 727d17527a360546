"""Lesson 03's exercise: the window's arithmetic as two functions.

``accumulate(accumulators, gradients)`` adds each gradient into its
accumulator in place and returns the accumulators (ValueError when the lists
differ in length); ``finish_window(accumulators, sample_count)`` returns the
window's gradients, sums over the sample count, and zeroes the accumulators
(an empty window gives zeros, not NaN).
"""

import keras
import numpy as np
import tensorflow as tf

import gaviz
from gaviz.course.exercise import Exercise, Incorrect, NotAttempted


def _check_basics(accumulate, finish_window):
    sums = [tf.Variable(tf.zeros((2, 2))), tf.Variable(tf.zeros(3))]
    returned = accumulate(sums, [tf.fill((2, 2), 1.5), tf.constant([1.0, 2.0, 3.0])])
    if returned is None and not any(np.any(s.numpy()) for s in sums):
        raise NotAttempted("accumulate still does nothing")
    if returned is not sums:
        raise Incorrect("accumulate should return the accumulators it was given (the same list)")
    accumulate(sums, [tf.fill((2, 2), -0.5), tf.ones(3)])
    if not (np.allclose(sums[0].numpy(), 1.0) and np.allclose(sums[1].numpy(), [2.0, 3.0, 4.0])):
        raise Incorrect("accumulate should add each gradient into its accumulator, in place")
    try:
        accumulate(sums, [tf.ones((2, 2))])
    except ValueError:
        pass
    else:
        raise Incorrect("accumulate should raise ValueError when the lists differ in length")
    result = finish_window(sums, 4)
    if result is None:
        raise NotAttempted("finish_window still returns None")
    if not (np.allclose(result[0], 0.25) and np.allclose(result[1], [0.5, 0.75, 1.0])):
        raise Incorrect("finish_window should divide each accumulator by sample_count")
    if any(np.any(s.numpy()) for s in sums):
        raise Incorrect("finish_window should reset the accumulators to zero")
    if not all(np.all(np.asarray(g) == 0) for g in finish_window(sums, 0)):
        raise Incorrect("an empty window (sample_count 0) should give zeros, not NaN")


def _ragged_window_gap(accumulate, finish_window) -> float:
    """A window of 5 + 27 + 8 samples on the demo model, against the big batch's gradient."""
    x, y = gaviz.demo.make_data(40, seed=0)
    model, loss = gaviz.demo.make_model(seed=0), keras.losses.MeanSquaredError()
    sums = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]
    for start, stop in [(0, 5), (5, 32), (32, 40)]:
        with tf.GradientTape() as tape:
            summed = tf.reduce_sum(loss.call(y[start:stop], model(x[start:stop], training=True)))
        accumulate(sums, tape.gradient(summed, model.trainable_variables))
    window = finish_window(sums, 40)
    with tf.GradientTape() as tape:
        mean_loss = loss(y, model(x, training=True))
    expected = tape.gradient(mean_loss, model.trainable_variables)
    return max(float(np.max(np.abs(np.asarray(g) - e.numpy()))) for g, e in zip(window, expected))


def _check_window(accumulate, finish_window) -> str:
    _check_basics(accumulate, finish_window)
    gap = _ragged_window_gap(accumulate, finish_window)
    if gap > 1e-5:
        raise Incorrect(f"on a ragged window the gradient is off the big batch's by {gap:.1e}")
    return f"a ragged window of 5 + 27 + 8 samples gives the big batch's gradient ({gap:.1e})"


window = Exercise(
    "03 accumulate and finish_window", _check_window,
    hints=["`accumulator.assign_add(gradient)` adds in place; check the lengths first.",
           "finish_window: divide first, then zero the accumulators (read the values before you "
           "reset them); `tf.math.divide_no_nan` turns 0 / 0 into 0."],
    solution_file="03_window.py")
