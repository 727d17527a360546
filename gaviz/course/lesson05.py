"""Lesson 05's exercises: repair what a micro-batch contributes, and the exact window loss."""

import keras
import numpy as np
import tensorflow as tf

from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.repairs import exact_with, require_attempted

#: A micro-batch of 4 samples whose squared errors are 1, 4, 9 and 16: summed 30, mean 7.5.
_Y, _Y_PRED = tf.zeros((4, 1)), tf.constant([[1.0], [2.0], [3.0], [4.0]])
_ROWS, _SUM, _MEAN = 4, 30.0, 7.5


def _what_micro_loss_returns(micro_loss):
    """(value, count) that ``micro_loss`` returns for the micro-batch above, as floats, or None
    when it returns something else (diagnose then says what goes wrong)."""
    try:
        value, count = micro_loss(keras.losses.MeanSquaredError(), _Y, _Y_PRED)
        return float(value), float(count)
    except (TypeError, ValueError):
        return None


def _check_micro_loss(micro_loss) -> str:
    require_attempted(micro_loss, "micro_loss still returns nothing")
    returned = _what_micro_loss_returns(micro_loss)
    if returned is not None:
        value, count = returned
        mean, summed = np.isclose(value, _MEAN), np.isclose(value, _SUM)
        if mean and np.isclose(count, _ROWS):
            raise Incorrect(
                f"for 4 samples with losses 1, 4, 9 and 16 it returns their mean, {value:g}, "
                f"and count {count:g}: the loop adds the micro-batches' means and divides by "
                "all the window's samples, so each update is about 1 / (samples per "
                "micro-batch) of the big batch's. Return the *sum* of the per-sample losses "
                "(`loss.call(y, y_pred)` gives them), 30 here, with the count")
        if mean and np.isclose(count, 1.0):
            raise Incorrect(
                f"for 4 samples with losses 1, 4, 9 and 16 it returns their mean, {value:g}, "
                "counted as one sample: the mean of means (mean_of_means) again, each "
                "micro-batch weighing the same whatever its size. Return the *sum* of the "
                "per-sample losses, 30 here, and the number of samples, 4")
        if summed and not np.isclose(count, _ROWS):
            raise Incorrect(
                f"for 4 samples it returns the summed loss, {value:g}, right, but count "
                f"{count:g}: the count is what the window divides by, the micro-batch's "
                "number of samples, 4 here")
    exact_with(micro_loss=micro_loss)
    return "lesson 03's loop with your micro_loss is exact by gaviz.diagnose, ragged " \
        "micro-batches included"


def _check_window_loss(window_loss) -> str:
    ragged = window_loss([np.array([1.0, 3.0]), np.array([0.5] * 6)], [np.ones(2), np.ones(6)])
    attempted(ragged)
    if np.isclose(ragged, 1.25):
        raise Incorrect("1.25 is the mean of the micro-batches' means; the window's loss is the "
                        "sum of all losses over the number of samples: (1 + 3 + 6 x 0.5) / 8")
    if not np.isclose(ragged, 0.875):
        raise Incorrect(f"ragged, unweighted: expected (1 + 3 + 6 x 0.5) / 8 = 0.875, got {ragged}")
    tokens = window_loss([np.array([[1.0, 2.0, 9.0]]), np.array([[4.0, 9.0, 9.0], [2.0, 6.0, 9.0]])],
                         [np.array([[1.0, 1.0, 0.0]]), np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])])
    if not np.isclose(tokens, 15.0 / 5):
        raise Incorrect("with masks, padding (weight 0) must not count: (1 + 2 + 4 + 2 + 6) / 5 "
                        f"real tokens = 3.0, got {tokens}")
    return "the total loss over the total weight, ragged and masked"


micro_loss = Exercise(
    "05 micro_loss", _check_micro_loss,
    hints=["`loss.call(y, y_pred)` gives one loss per sample: sum them, don't average them.",
           "Return the sum and the number of samples, `float(tf.shape(per_sample)[0])`: the "
           "loop adds the counts and divides the window once, by its own count."],
    solution_file="05_micro_loss.py")

window_loss = Exercise(
    "05 window_loss", _check_window_loss,
    hints=["Multiply each micro-batch's losses by its weights and add everything up.",
           "Divide that by the sum of all the weights of the window, once."],
    solution_file="05_window_loss.py")
