"""Lesson 05's exercises: repair what a micro-batch contributes, and the exact window loss."""

import numpy as np

from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.repairs import exact_with, require_attempted


def _check_micro_loss(micro_loss) -> str:
    require_attempted(micro_loss, "micro_loss still returns nothing")
    exact_with(micro_loss=micro_loss)
    return "your loop is exact by gaviz.diagnose, ragged micro-batches included"


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
