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
    if len(accumulators) != len(originals):
        raise Incorrect(f"reset emptied the list (or changed its length: {len(accumulators)} "
                        f"entries for {len(originals)} accumulators): the loop keeps its own "
                        "references to the variables, which still hold the window's sum. Zero "
                        "each variable in place (`assign`) and leave the list as it is")
    if any(a is not o for a, o in zip(accumulators, originals)):
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


#: (norms, factor, expected, why): each case differs from the others in one way, so that a
#: rule that is wrong in one way (a pair skipped, >= for >, the factor ignored or strict) fails
#: one case and the message says which.
_GROWTH_CASES = [
    ([1.0, 2.0, 3.0], 2.0, True, "every update larger than the one before, the last 3x the first"),
    ([0.01, 0.02, 0.05], 2.0, True, "update sizes come at any scale: 0.05 is 5x 0.01; "
     "`factor` is a ratio, not a difference (the last >= factor x the first)"),
    ([1.0, 3.0], 2.0, True, "two updates are enough: one pair, rising, the last 3x the first"),
    ([1.0, 1.5, 1.9], 2.0, False, "rising every time, but the last is under 2x the first"),
    ([1.0, 1.5, 1.9], 1.5, True, "`factor` sets how much larger the last must be: 1.9 >= 1.5 x 1"),
    ([1.0, 1.5, 2.0], 2.0, True, "the last is exactly 2x the first: *at least* factor times"),
    ([1.0, 0.5, 3.0], 2.0, False, "the second update shrank (0.5 after 1.0): every pair must "
     "rise, the first pair included, not only the last one"),
    ([1.0, 3.0, 2.5, 4.0], 2.0, False, "a dip in the middle (2.5 after 3.0): every pair must "
     "rise, not only the first and the last"),
    ([1.0, 2.0, 2.0, 3.0], 2.0, False, "a plateau (2.0, then 2.0): an update the same size as "
     "the one before is not larger; compare with >, not >="),
    ([3.0, 2.0, 1.0], 2.0, False, "shrinking, as exact updates do"),
]
_TOO_FEW = ([1.0], [])


def _check_update_norms_grow(update_norms_grow) -> str:
    attempted(update_norms_grow([1.0, 2.0, 3.0]))
    for norms, factor, expected, why in _GROWTH_CASES:
        call = f"update_norms_grow({norms}{'' if factor == 2.0 else f', factor={factor}'})"
        got = update_norms_grow(list(norms), factor=factor)
        if isinstance(got, (list, tuple, np.ndarray)) and np.size(got) != 1:
            raise Incorrect(f"{call} returned {got!r}, one answer per pair: reduce them to one "
                            "True or False (every pair must rise: `all(...)`)")
        if bool(got) != expected:
            raise Incorrect(f"{call} should be {expected}: {why}")
    for norms in _TOO_FEW:
        try:
            got = update_norms_grow(list(norms))
        except ValueError:
            continue
        except Exception as error:  # noqa: BLE001 - the wrong exception: say which
            raise Incorrect(f"update_norms_grow({norms}) raised {type(error).__name__}; with "
                            "fewer than two sizes nothing can grow: check the length first and "
                            "raise ValueError") from error
        raise Incorrect(f"update_norms_grow({norms}) returned {got!r}: with fewer than two sizes "
                        "there is no pair to compare, so raise ValueError")
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
