"""Lesson 03's exercises: the arithmetic of one accumulation window.

::

    from gaviz.course import lesson03
    lesson03.accumulate.check(accumulate)
    lesson03.finish_window.check(finish_window)

``finish_window`` has the signature of :func:`gaviz.course.accumulation_epoch`'s
``finish_window`` argument: it only divides. Resetting the accumulators is a
piece of its own (lesson 04's exercise).
"""

from __future__ import annotations

from collections.abc import Iterator

import keras
import numpy as np
import tensorflow as tf

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, NotAttempted, attempted
from gaviz.course.loop import make_accumulators, summed_loss

#: A ragged window: micro-batches of 5, 27 and 8 samples.
_RAGGED = [(0, 5), (5, 32), (32, 40)]
#: Right answers (divide_no_nan, times the inverse, NumPy, via float64) all land 1.5e-7 from
#: the 40 samples' gradient (measured); a count half a sample off lands 1.2e-2 away, one
#: sample off 2.4e-2. 1e-5 is between.
_RAGGED_TOLERANCE = 1e-5


def _values(tensors) -> list:
    return [np.asarray(t, dtype="float64") for t in tensors]


#: The check's sums divided in float32 (divide_no_nan, times the inverse) land within 4.8e-8
#: of float64's (measured, by 5 and by 0.5); the nearest wrong answer, a count off by one
#: sample (6 or 4 for 5), lands 0.2 away. 1e-6 is between.
_ATOL = 1e-6


def _same(values_a, values_b, atol=_ATOL) -> bool:
    return all(a.shape == b.shape and np.allclose(a, b, atol=atol)
               for a, b in zip(values_a, values_b))


def _check_accumulate(accumulate) -> str:
    # The loop adds into the variables themselves, through its own references: what they hold
    # is read back from them, not from the list accumulate was given or what it returned.
    variables = [tf.Variable(tf.zeros((2, 2))), tf.Variable(tf.zeros(3))]
    accumulators = list(variables)
    first = [tf.fill((2, 2), 1.5), tf.constant([1.0, 2.0, 3.0])]
    second = [tf.fill((2, 2), -0.5), tf.ones(3)]
    returned = accumulate(accumulators, first)
    unchanged = not any(np.any(v.numpy()) for v in variables)
    replaced = len(accumulators) != len(variables) or any(
        a is not v for a, v in zip(accumulators, variables))
    if returned is None and unchanged and not replaced:
        raise NotAttempted()
    if unchanged and replaced:
        raise Incorrect("it replaced the list's entries with new values (`accumulators[i] = "
                        "...`): the variables you were given still hold zeros, and they are what "
                        "the loop adds into and divides, through its own references. Add into "
                        "each in place with `accumulator.assign_add(gradient)`")
    if unchanged:
        raise Incorrect("the accumulators themselves still hold zeros: add into them in place "
                        "with `accumulator.assign_add(gradient)` (a new list of tensors leaves "
                        "the loop's variables untouched)")
    if returned is not accumulators:
        raise Incorrect("return `accumulators`, the same list you were given (so a call can be "
                        f"chained); it returned {type(returned).__name__}")
    accumulate(accumulators, second)
    got = _values(variables)
    if _same(got, _values(second)):
        raise Incorrect("after two calls the accumulators hold only the second gradients: "
                        "`assign` replaces, `assign_add` adds")
    expected = [np.full((2, 2), 1.0), np.array([2.0, 3.0, 4.0])]
    if not _same(got, expected):
        raise Incorrect(f"after adding {_values(first)[1]} and then {_values(second)[1]}, the "
                        f"second accumulator holds {got[1]}; expected {expected[1]}")
    _check_mismatch_refused(accumulate, variables)
    return "each gradient is added into its own accumulator, in place"


def _check_mismatch_refused(accumulate, variables) -> None:
    """Incorrect unless 1 gradient for 2 accumulators raises ValueError, before any change."""
    before = _values(variables)
    try:
        accumulate(list(variables), [tf.ones((2, 2))])
    except ValueError:
        pass
    except Exception as error:  # noqa: BLE001 - the wrong exception: say which
        raise Incorrect(f"with 1 gradient for 2 accumulators it raised {type(error).__name__}; "
                        "raise ValueError (the caller passed the wrong list)") from error
    else:
        raise Incorrect("with 1 gradient for 2 accumulators it raised nothing: raise ValueError "
                        "(`zip` would silently leave the second accumulator out)")
    if not _same(_values(variables), before):
        raise Incorrect("with 1 gradient for 2 accumulators it raised ValueError, but added into "
                        "the first accumulator before raising: compare the lengths before "
                        "changing anything, so that a refused call leaves the window as it was")


def _check_finish_window(finish_window) -> str:
    accumulators = [tf.Variable([[4.0, -2.0], [6.0, 0.0]]), tf.Variable([2.0, 3.0, 4.0])]
    sums = _values(accumulators)
    result = finish_window(accumulators, 5)  # not 4, lesson 03's k: no constant passes
    attempted(result)
    if isinstance(result, Iterator):  # a generator or a map: the loop zips it, as a list
        result = list(result)
    if len(result) != len(sums):
        raise Incorrect(f"it returned {len(result)} gradients for {len(sums)} accumulators: "
                        "return one per accumulator, in order")
    got = _values(result)
    if _same(got, sums):
        raise Incorrect("the gradients equal the sums: divide each accumulator by "
                        "`sample_count`, the number of samples in the window")
    if _same(got, [s * 5 for s in sums]):
        raise Incorrect("the gradients are the sums times sample_count: divide, do not multiply")
    if not _same(got, [s / 5 for s in sums]):
        raise Incorrect(f"for the sums {sums[1]} and sample_count 5 it returned {got[1]}; "
                        f"expected {sums[1] / 5}")
    if not _same(_values(accumulators), sums):
        raise Incorrect("it changed the accumulators (they now hold "
                        f"{_values(accumulators)[1]}): only return the divided gradients; "
                        "resetting is a piece of its own (lesson 04)")
    _check_small_count(finish_window, accumulators, sums)
    try:
        empty = _values(finish_window([tf.Variable([0.0, 0.0])], 0))
    except ZeroDivisionError as error:
        raise Incorrect("an empty window (sample_count 0) raised ZeroDivisionError: use "
                        "`tf.math.divide_no_nan`, which gives 0 for 0 / 0") from error
    if not all(np.all(g == 0) for g in empty):
        raise Incorrect(f"an empty window (sample_count 0) gave {empty[0]}, not zeros: use "
                        "`tf.math.divide_no_nan`, which gives 0 for 0 / 0")
    difference = _ragged_window_difference(finish_window)
    if not difference <= _RAGGED_TOLERANCE:
        raise Incorrect("a ragged window of 5, 27 and 8 samples: its gradient differs from the "
                        f"40 samples' mean-loss gradient by {difference:.1e}")
    return ("divided once by the sample count, a ragged window of 5, 27 and 8 samples gives "
            f"the gradient of one batch of 40 (largest difference {difference:.1e})")


def _check_small_count(finish_window, accumulators, sums) -> None:
    """Incorrect unless a count below 1 divides too: a window's count is its samples' weights
    summed (lesson 05's masks, sample weights), which can be 0.5."""
    got = _values(finish_window(accumulators, 0.5))
    if not _same(got, [s / 0.5 for s in sums]):
        raise Incorrect(f"for the sums {sums[1]} and sample_count 0.5 it returned {got[1]}; "
                        f"expected {sums[1] / 0.5}: a window's count is its samples' weights "
                        "summed, and weights can sum to less than 1. Divide by the count "
                        "whatever it is; only 0 needs care")


def _ragged_window_difference(finish_window) -> float:
    """Accumulates micro-batches of 5, 27, 8 exactly; compares ``finish_window``'s result."""
    x, y = demo.make_data(40, seed=3)
    model = demo.make_model(seed=3)
    loss = keras.losses.MeanSquaredError()
    variables = model.trainable_variables
    accumulators, count = make_accumulators(variables), 0.0
    for start, stop in _RAGGED:
        with tf.GradientTape() as tape:
            objective, samples = summed_loss(loss, y[start:stop], model(x[start:stop]))
        for accumulator, gradient in zip(accumulators, tape.gradient(objective, variables)):
            accumulator.assign_add(gradient)
        count += samples
    with tf.GradientTape() as tape:
        mean_loss = loss(y, model(x))
    expected = _values(tape.gradient(mean_loss, variables))
    got = _values(finish_window(accumulators, count))
    return max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected))


accumulate = Exercise(
    "03 accumulate", _check_accumulate,
    ["Loop over `zip(accumulators, gradients)`; a `tf.Variable` has a method that adds in "
     "place.",
     "Compare `len(accumulators)` and `len(gradients)` first, and `raise ValueError(...)` "
     "when they differ.",
     "Return the list you were given."],
    "03_window.py")

finish_window = Exercise(
    "03 finish_window", _check_finish_window,
    ["Return a new list: each accumulator divided by `sample_count`. Leave the accumulators "
     "as they are.",
     "`tf.math.divide_no_nan(a, b)` is `a / b`, except that it gives 0 where b is 0.",
     "Cast the count to the accumulator's dtype, `tf.cast(sample_count, accumulator.dtype)`, "
     "so an int count works too."],
    "03_window.py")
