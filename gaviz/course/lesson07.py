"""Lesson 07's exercise: the learning rate for a new effective batch."""

import math

from gaviz.course.exercise import Exercise, Incorrect, attempted

#: (arguments, expected): the rules at both ways of scaling, and with no change.
_CASES = [
    ((0.1, 32, 128, "linear"), 0.4),
    ((0.1, 32, 128, "sqrt"), 0.2),
    ((0.1, 256, 64, "linear"), 0.025),
    ((0.1, 256, 64, "sqrt"), 0.05),
    ((1e-3, 64, 64, "sqrt"), 1e-3),
]
_BAD = [dict(rule="cubic"), dict(effective_batch=0), dict(base_batch=0), dict(base_lr=-0.1)]


def _check_scaled_learning_rate(scaled_learning_rate) -> str:
    attempted(scaled_learning_rate(0.1, 32, 128))
    if not math.isclose(scaled_learning_rate(0.1, 32, 128), 0.4):
        raise Incorrect("the default rule should be linear: scaled_learning_rate(0.1, 32, 128) is "
                        f"0.4, got {scaled_learning_rate(0.1, 32, 128)}")
    for (base_lr, base_batch, effective_batch, rule), expected in _CASES:
        got = scaled_learning_rate(base_lr, base_batch, effective_batch, rule=rule)
        if not math.isclose(got, expected, rel_tol=1e-9):
            raise Incorrect(f"scaled_learning_rate({base_lr}, {base_batch}, {effective_batch}, "
                            f"rule={rule!r}) should be {expected}, got {got}")
    for bad in _BAD:
        arguments = dict(base_lr=0.1, base_batch=32, effective_batch=128, rule="linear")
        arguments.update(bad)
        try:
            scaled_learning_rate(**arguments)
        except ValueError:
            continue
        raise Incorrect(f"{bad} should raise ValueError (an unknown rule, or a number that is "
                        "not positive)")
    return "both rules, both directions, and bad input refused"


scaled_learning_rate = Exercise(
    "07 scaled_learning_rate", _check_scaled_learning_rate,
    hints=["The batch grew by the factor m = effective_batch / base_batch; the linear rule "
           "multiplies the rate by m, the square-root rule by the square root of m.",
           "Check `rule` first and raise ValueError for anything but \"linear\" or \"sqrt\"; "
           "then check each number with `if not value > 0` (that also refuses NaN)."],
    solution_file="07_lr_scaling.py")
