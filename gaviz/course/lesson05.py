"""Lesson 05's exercises: repair what a micro-batch contributes, and the exact window loss."""

import keras
import numpy as np
import tensorflow as tf

from gaviz.course.exercise import Exercise, Incorrect, attempted, defined_at
from gaviz.course.repairs import exact_with, require_attempted

#: Two micro-batches of different sizes, neither 4 (lesson 05's k) nor 32 (its micro-batch), so
#: that no constant count coincides with theirs: squared errors 1, 4, 9 (summed 14, mean 4.67)
#: and 1, 4, 9, 16, 25 (summed 55, mean 11).
_CASES = [(3, 14.0), (5, 55.0)]


def _case(rows):
    return tf.zeros((rows, 1)), tf.reshape(tf.range(1.0, rows + 1.0), (rows, 1))


def _returned(micro_loss, rows):
    """(value, count) ``micro_loss`` returns for the case of ``rows`` samples, as floats; None
    when it raises (the loop then says what goes wrong, at the learner's line)."""
    try:
        returned = micro_loss(keras.losses.MeanSquaredError(), *_case(rows))
    except (TypeError, ValueError):
        return None
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        what = (f"{len(returned)} values" if isinstance(returned, (tuple, list)) else
                f"one value, a {'tensor' if tf.is_tensor(returned) else type(returned).__name__}"
                f"{f' of shape {tuple(np.shape(returned))}' if np.ndim(returned) else ''}")
        raise Incorrect(f"for {rows} samples micro_loss returned {what}"
                        f"{defined_at(micro_loss)}: return two, the micro-batch's summed loss "
                        "and its number of samples, as a pair: the loop differentiates the "
                        "first and adds the second to the window's count")
    value, count = returned
    if np.size(count) != 1:
        raise Incorrect(f"for {rows} samples the count is {np.asarray(count).tolist()}, not one "
                        "number: the count is how many samples the micro-batch holds "
                        "(`tf.shape(y)` is a shape, rows and columns)")
    if np.size(value) != 1:
        raise Incorrect(f"for {rows} samples it returns {np.size(value)} losses, one per sample: "
                        "add them up into one number, so that the window adds sums")
    return float(np.asarray(value).reshape(())), float(np.asarray(count).reshape(()))


def _check_micro_loss(micro_loss) -> str:
    require_attempted(micro_loss, "micro_loss still returns nothing")
    returned = [_returned(micro_loss, rows) for rows, _ in _CASES]
    if None not in returned:
        for (rows, summed), (value, count) in zip(_CASES, returned):
            _name_the_fault(rows, summed, value, count, counts=[c for _, c in returned])
    exact_with(micro_loss=micro_loss)
    return "lesson 03's loop with your micro_loss is exact by gaviz.diagnose, ragged " \
        "micro-batches included"


def _name_the_fault(rows, summed, value, count, counts) -> None:
    """Incorrect, naming the fault, when ``(value, count)`` is a known wrong pair for the case
    of ``rows`` samples (losses 1, 4, ..., rows**2, summed ``summed``)."""
    losses = ", ".join(str(i * i) for i in range(1, rows + 1))
    what = f"for {rows} samples with losses {losses}"
    if np.isclose(value, rows) and np.isclose(count, summed):
        raise Incorrect(
            f"{what} it returns ({value:g}, {count:g}): the count first, the summed loss second, "
            "the other way round. The loop differentiates the first value and adds the second "
            "to the window's count: the summed loss first")
    mean = np.isclose(value, summed / rows)
    if mean and np.isclose(count, rows):
        raise Incorrect(
            f"{what} it returns their mean, {value:.4g}, and count {count:g}: the loop adds "
            "the micro-batches' means and divides by all the window's samples, so each update "
            "is about 1 / (samples per micro-batch) of the big batch's. Return the *sum* of the "
            "per-sample losses (`loss.call(y, y_pred)` gives them), with the count")
    if mean and np.isclose(count, 1.0):
        raise Incorrect(
            f"{what} it returns their mean, {value:.4g}, counted as one sample: the mean of "
            "means (mean_of_means) again, each micro-batch weighing the same whatever its size. "
            "Return the *sum* of the per-sample losses, and the number of samples")
    if not np.isclose(value, summed):
        return  # diagnose names what this does to the loop
    if len(set(counts)) == 1:
        raise Incorrect(
            f"it returns the summed loss, right, but the same count, {count:g}, for micro-batches "
            f"of {_CASES[0][0]} and {_CASES[1][0]} samples: the count is what the window divides "
            "by, *this* micro-batch's number of samples (k, or a batch size, is a constant that "
            "only some micro-batches match)")
    if not np.isclose(count, rows):
        raise Incorrect(f"{what} it returns the summed loss, {value:g}, right, but count "
                        f"{count:g}: the count is what the window divides by, the micro-batch's "
                        f"number of samples, {rows} here")


# window_loss's cases are judged by np.isclose (relative 1e-5): right answers (in order,
# concatenated into np.average) give them exactly in float64 (measured); the nearest wrong one,
# the nonzero weights counted, is 6% off.


def _check_window_loss(window_loss) -> str:
    ragged = window_loss([np.array([1.0, 3.0]), np.array([0.5] * 6)], [np.ones(2), np.ones(6)])
    attempted(ragged)
    if np.isclose(ragged, 1.25):
        raise Incorrect("1.25 is the mean of the micro-batches' means; the window's loss is the "
                        "sum of all losses over the number of samples: (1 + 3 + 6 x 0.5) / 8")
    if np.isclose(ragged, 7.0):
        raise Incorrect("7.0 is the window's summed loss (1 + 3 + 6 x 0.5): divide it, once, by "
                        "the window's total weight")
    if np.isclose(ragged, 3.5):
        raise Incorrect("3.5 is the summed loss divided by the number of micro-batches, 2: the "
                        "window's loss divides by its total weight, here its 8 samples")
    if not np.isclose(ragged, 0.875):
        raise Incorrect(f"ragged, unweighted: expected (1 + 3 + 6 x 0.5) / 8 = 0.875, got {ragged}")
    tokens = window_loss([np.array([[1.0, 2.0, 9.0]]), np.array([[4.0, 9.0, 9.0], [2.0, 6.0, 9.0]])],
                         [np.array([[1.0, 1.0, 0.0]]), np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])])
    if not np.isclose(tokens, 15.0 / 5):
        raise Incorrect("with masks, padding (weight 0) must not count: (1 + 2 + 4 + 2 + 6) / 5 "
                        f"real tokens = 3.0, got {tokens}")
    weighted = window_loss([np.array([1.0, 3.0]), np.array([0.5] * 6)],
                           [np.array([0.5, 2.0]), np.ones(6)])
    if not np.isclose(weighted, 9.5 / 8.5):
        nonzero = ("; that is over how many weights are not 0 (8): divide by the weights' "
                   "sum, not how many are not 0" if np.isclose(weighted, 9.5 / 8) else "")
        raise Incorrect("sample weights 0.5 and 2 weigh their losses 1 and 3, and the sum of the "
                        "weights divides: (0.5 x 1 + 2 x 3 + 6 x 0.5) / (0.5 + 2 + 6) = "
                        f"{9.5 / 8.5:.4f}, got {weighted}{nonzero}")
    return "the total loss over the total weight, ragged, masked and weighted"


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
