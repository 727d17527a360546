"""Lesson 07's exercise: the learning rate for a new effective batch.

::

    from gaviz.course import lesson07
    lesson07.scaled_learning_rate.check(scaled_learning_rate)
"""

from __future__ import annotations

import math

from gaviz.course.exercise import Exercise, Incorrect, attempted

#: (base_lr, base_batch, effective_batch, rule) -> the expected rate.
_CASES = (
    ((0.1, 32, 128, "linear"), 0.4),
    ((0.1, 256, 64, "linear"), 0.025),  # a smaller batch: a smaller rate
    ((0.1, 32, 128, "sqrt"), 0.2),
    ((0.1, 256, 64, "sqrt"), 0.05),
    ((3e-4, 512, 512, "sqrt"), 3e-4),
)
_BAD = (
    (dict(rule="cubic"), "an unknown rule='cubic'"),
    (dict(effective_batch=0), "effective_batch=0"),
    (dict(base_batch=0), "base_batch=0"),
    (dict(base_lr=-0.1), "base_lr=-0.1"),
)


def _check_scaled_learning_rate(scaled_learning_rate) -> str:
    attempted(scaled_learning_rate(0.1, 32, 128))
    for (base_lr, base_batch, effective_batch, rule), expected in _CASES:
        got = scaled_learning_rate(base_lr, base_batch, effective_batch, rule=rule)
        call = (f"scaled_learning_rate({base_lr}, {base_batch}, {effective_batch}, "
                f"rule={rule!r})")
        if got is None or not math.isclose(float(got), expected, rel_tol=1e-9):
            ratio = base_batch / effective_batch
            inverted = expected * (ratio if rule == "linear" else math.sqrt(ratio)) ** 2
            if got is not None and math.isclose(float(got), inverted, rel_tol=1e-9):
                raise Incorrect(f"{call} gave {got}, expected {expected}: the ratio is upside "
                                "down (effective_batch / base_batch: a bigger batch, a bigger rate)")
            raise Incorrect(f"{call} gave {got}, expected {expected}")
    if scaled_learning_rate(0.1, 32, 128) != scaled_learning_rate(0.1, 32, 128, rule="linear"):
        raise Incorrect("the default rule should be 'linear'")
    for change, what in _BAD:
        arguments = dict(base_lr=0.1, base_batch=32, effective_batch=128, rule="linear")
        arguments.update(change)
        try:
            got = scaled_learning_rate(**arguments)
        except ValueError:
            continue
        raise Incorrect(f"{what} should raise ValueError; it returned {got!r}")
    return ("linear and square-root rules both ways, bad input refused: k = 16 at micro-batch 32 "
            f"turns a rate of 0.02 into {scaled_learning_rate(0.02, 32, 512):g} (linear) or "
            f"{scaled_learning_rate(0.02, 32, 512, rule='sqrt'):g} (sqrt)")


scaled_learning_rate = Exercise(
    "07 scaled learning rate",
    _check_scaled_learning_rate,
    hints=[
        "Both rules start from the same ratio: how many times bigger the new effective batch is "
        "than the one the rate was tuned at.",
        "Linear multiplies base_lr by that ratio; square-root multiplies it by the ratio's square "
        "root (math.sqrt).",
        "Check the arguments first: raise ValueError for a rule other than 'linear' or 'sqrt', "
        "and for any number that is not > 0.",
    ],
    solution_file="07_lr_scaling.py",
)
