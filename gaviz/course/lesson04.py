"""Lesson 04's exercises: repair the reset, and spot a missing one from update sizes."""

import numpy as np
import tensorflow as tf

from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.repairs import exact_with, require_attempted


def _check_reset(reset) -> str:
    require_attempted(reset, "reset does nothing yet: every accumulator still holds the "
                      "window's sum")
    rng = np.random.default_rng(0)
    shapes = [((), "float32"), ((3,), "float32"), ((2, 4), "float64")]
    accumulators = [tf.Variable(rng.normal(size=s).astype(d)) for s, d in shapes]
    originals = list(accumulators)
    reset(accumulators)
    still = [np.any(a.numpy()) for a in accumulators]
    if all(still) and accumulators == originals:
        raise Incorrect("your reset ran, but every accumulator still holds the window's sum: "
                        "`accumulators = [...]` or `accumulator = tf.zeros_like(accumulator)` "
                        "gives a name inside reset a new value and leaves the variables the loop "
                        "adds into as they were. Change each one in place: "
                        "`accumulator.assign(...)`")
    if any(a is not o for a, o in zip(accumulators, originals)) or len(accumulators) != 3:
        raise Incorrect("reset should change the accumulators in place (`assign`), not replace "
                        "the list's entries: the loop keeps its own references to them")
    if any(still):
        raise Incorrect(f"{sum(still)} of {len(still)} accumulators are not zero after reset")
    for accumulator, (shape, dtype) in zip(accumulators, shapes):
        if tuple(accumulator.shape) != shape or accumulator.dtype != tf.as_dtype(dtype):
            raise Incorrect("reset should keep each accumulator's shape and dtype")
    exact_with(reset=reset)
    return ("the accumulators are zeroed in place, and lesson 03's loop with your reset is exact "
            "by gaviz.diagnose")


def _check_update_norms_grow(update_norms_grow) -> str:
    attempted(update_norms_grow([1.0, 2.0, 3.0]))
    cases = [([1.0, 2.0, 3.0], True, "rising to 3x the first"),
             ([1.0, 1.5, 1.9], False, "rising, but the last is under 2x the first"),
             ([1.0, 3.0, 2.5], False, "not rising every time"),
             ([3.0, 2.0, 1.0], False, "shrinking, as exact updates do")]
    for norms, expected, why in cases:
        if bool(update_norms_grow(norms)) != expected:
            raise Incorrect(f"update_norms_grow({norms}) should be {expected} ({why})")
    if not update_norms_grow([1.0, 1.5, 1.9], factor=1.5):
        raise Incorrect("`factor` should set how much larger the last update must be")
    return "it flags growing updates, and not a correct trainer's"


reset = Exercise(
    "04 reset", _check_reset,
    hints=["Each accumulator is a tf.Variable: `accumulator.assign(...)` changes it in place.",
           "`tf.zeros_like(accumulator)` has the accumulator's shape and dtype."],
    solution_file="04_reset.py")

update_norms_grow = Exercise(
    "04 update_norms_grow", _check_update_norms_grow,
    hints=["`np.diff(norms) > 0` says, for each pair, whether the update grew.",
           "Both conditions must hold: every step rises, and norms[-1] >= factor * norms[0]."],
    solution_file="04_update_norms_grow.py")
