"""Lesson 07's exercise checker passes the solution, says "not attempted" for the
lesson's stub, and names the fault of realistic wrong answers."""

import importlib
import math
import pathlib
import sys

from gaviz.course import lesson07

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.07_lr_scaling")

EXERCISE = lesson07.scaled_learning_rate


def stub(base_lr, base_batch, effective_batch, rule="linear"):
    ...  # your code here (the lesson's stub)


def test_the_solution_passes():
    outcome = EXERCISE.evaluate(solution.scaled_learning_rate)
    assert outcome.status == "pass", outcome.message
    assert "0.32 (linear)" in outcome.message and "0.08 (sqrt)" in outcome.message


def test_the_stub_is_not_attempted():
    assert EXERCISE.evaluate(stub).status == "not attempted"


def test_an_upside_down_ratio_is_named():
    def inverted(base_lr, base_batch, effective_batch, rule="linear"):
        ratio = base_batch / effective_batch  # wrong way round
        return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))

    outcome = EXERCISE.evaluate(inverted)
    assert outcome.status == "fail"
    assert "gave 0.025, expected 0.4" in outcome.message and "upside down" in outcome.message


def test_sqrt_forgotten_is_named():
    def linear_only(base_lr, base_batch, effective_batch, rule="linear"):
        return solution.scaled_learning_rate(base_lr, base_batch, effective_batch)

    outcome = EXERCISE.evaluate(linear_only)
    assert outcome.status == "fail"
    assert "rule='sqrt') gave 0.4, expected 0.2" in outcome.message


def test_bad_input_accepted_is_named():
    def no_checks(base_lr, base_batch, effective_batch, rule="linear"):
        ratio = effective_batch / base_batch
        return base_lr * (math.sqrt(ratio) if rule == "sqrt" else ratio)

    outcome = EXERCISE.evaluate(no_checks)
    assert outcome.status == "fail"
    assert "rule='cubic' should raise ValueError" in outcome.message


def test_a_zero_batch_accepted_is_named():
    def wrong_error(base_lr, base_batch, effective_batch, rule="linear"):
        if rule not in ("linear", "sqrt"):
            raise ValueError(rule)
        ratio = effective_batch / base_batch  # 0 for effective_batch=0: no error
        return base_lr * (math.sqrt(ratio) if rule == "sqrt" else ratio)

    outcome = EXERCISE.evaluate(wrong_error)
    assert outcome.status == "fail"
    assert "effective_batch=0 (every number must be > 0, not >= 0) should raise ValueError" in \
        outcome.message


def test_a_smaller_batch_refused_is_told_it_is_valid():
    def refuses(base_lr, base_batch, effective_batch, rule="linear"):
        if rule not in ("linear", "sqrt") or min(base_lr, base_batch, effective_batch) <= 0:
            raise ValueError("bad")
        if effective_batch < base_batch:
            raise ValueError("smaller")
        ratio = effective_batch / base_batch
        return base_lr * (math.sqrt(ratio) if rule == "sqrt" else ratio)

    outcome = EXERCISE.evaluate(refuses)
    assert outcome.status == "fail"
    assert "scaled_learning_rate(0.1, 256, 64, rule='linear') raised ValueError" in outcome.message
    assert "these arguments are valid, a smaller batch, a smaller rate" in outcome.message


def test_hints_do_not_give_the_answer_away():
    assert len(EXERCISE.hints) >= 2
    for hint in EXERCISE.hints:
        assert "base_lr *" not in hint and "return" not in hint
