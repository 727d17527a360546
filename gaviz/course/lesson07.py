"""Lesson 07's exercise: the learning rate for a new effective batch.

::

    from gaviz.course import lesson07
    lesson07.scaled_learning_rate.check(scaled_learning_rate)
"""

from __future__ import annotations

import math

from gaviz.course.exercise import Exercise, Incorrect, attempted, raised

#: (base_lr, base_batch, effective_batch, rule) -> the expected rate, and what the case is.
_CASES = (
    ((0.1, 32, 128, "linear"), 0.4, "a bigger batch, a bigger rate"),
    ((0.1, 256, 64, "linear"), 0.025, "a smaller batch, a smaller rate: scaling works both ways"),
    ((0.1, 32, 128, "sqrt"), 0.2, "a bigger batch, a bigger rate"),
    ((0.1, 256, 64, "sqrt"), 0.05, "a smaller batch, a smaller rate: scaling works both ways"),
    ((3e-4, 512, 512, "sqrt"), 3e-4, "the same batch, the same rate"),
)
_ZERO = " (every number must be > 0, not >= 0)"
_BAD = (
    (dict(rule="cubic"), "an unknown rule='cubic'"),
    (dict(effective_batch=0), "effective_batch=0" + _ZERO),
    (dict(base_batch=0), "base_batch=0" + _ZERO),
    (dict(base_lr=-0.1), "base_lr=-0.1"),
    (dict(base_lr=0.0), "base_lr=0.0 (a rate of 0 trains nothing)" + _ZERO),
    (dict(effective_batch=-64), "effective_batch=-64"),
)


#: Right answers (the solution, a power, a square root) give the cases' rates exactly in float64
#: (measured), and another order of the same operations within a few 1e-16; the nearest wrong
#: one, `//` or a rule swapped, is off by 2x or more. Between:
_REL_TOL = 1e-9


def _scaled(base_lr, ratio, rule):
    return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))


def _why(got, base_lr, base_batch, effective_batch, rule) -> str:
    """What a wrong rate ``got`` did, when it is one of the usual mistakes; else ""."""
    def near(value):
        return value is not None and math.isclose(float(got), value, rel_tol=_REL_TOL, abs_tol=1e-15)

    if near(_scaled(base_lr, base_batch / effective_batch, rule)):
        return (": the ratio is upside down (effective_batch / base_batch: a bigger batch, a "
                "bigger rate)")
    if near(_scaled(base_lr, effective_batch // base_batch, rule)):
        return (f": `//` is integer division, and {effective_batch} // {base_batch} = "
                f"{effective_batch // base_batch} drops the fraction; the ratio needs `/`")
    other = "sqrt" if rule == "linear" else "linear"
    if near(_scaled(base_lr, effective_batch / base_batch, other)):
        return f": that is the {other} rule's rate; check how `rule` picks the formula"
    if near(math.sqrt(base_lr * effective_batch / base_batch)):
        return ": the square root is of base_lr x ratio; only the ratio goes under it"
    return ""


def _check_scaled_learning_rate(scaled_learning_rate) -> str:
    attempted(scaled_learning_rate(0.1, 32, 128))
    for (base_lr, base_batch, effective_batch, rule), expected, case in _CASES:
        call = (f"scaled_learning_rate({base_lr}, {base_batch}, {effective_batch}, "
                f"rule={rule!r})")
        try:
            got = scaled_learning_rate(base_lr, base_batch, effective_batch, rule=rule)
        except ValueError as error:
            said = raised(error, scaled_learning_rate).removeprefix("your code raised ")
            raise Incorrect(f"{call} raised {said}: these arguments are valid, {case}") from None
        if got is None or isinstance(got, str):
            raise Incorrect(f"{call} returned {got!r}: return the rate, a number")
        if not math.isclose(float(got), expected, rel_tol=_REL_TOL):
            raise Incorrect(f"{call} gave {got}, expected {expected}"
                            f"{_why(got, base_lr, base_batch, effective_batch, rule)}")
    if scaled_learning_rate(0.1, 32, 128) != scaled_learning_rate(0.1, 32, 128, rule="linear"):
        raise Incorrect("the default rule should be 'linear'")
    for change, what in _BAD:
        arguments = dict(base_lr=0.1, base_batch=32, effective_batch=128, rule="linear")
        arguments.update(change)
        try:
            got = scaled_learning_rate(**arguments)
        except ValueError:
            continue
        except Exception as error:  # noqa: BLE001 - the wrong exception: say which
            raise Incorrect(f"{what} should raise ValueError; it raised {type(error).__name__}: "
                            "check the arguments before using them") from error
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
