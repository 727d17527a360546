"""Lesson 01's checkers pass the solution, call the stub not attempted, and name
the fault of realistic wrong answers."""

import importlib
import pathlib
import sys

import pytest

from gaviz.course import lesson01

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.01_batch_sizes")


def stub(*args):
    ...  # your code here


def test_the_solution_passes():
    assert lesson01.effective_batch_size.evaluate(solution.effective_batch_size).status == "pass"
    assert lesson01.micro_batch_size_for.evaluate(solution.micro_batch_size_for).status == "pass"


def test_the_stub_is_not_attempted():
    assert lesson01.effective_batch_size.evaluate(stub).status == "not attempted"
    assert lesson01.micro_batch_size_for.evaluate(stub).status == "not attempted"


def fails_with(exercise, answer, *expected):
    outcome = exercise.evaluate(answer)
    assert outcome.status == "fail", outcome
    for text in expected:
        assert text in outcome.message, outcome.message


def test_forgetting_the_replicas_is_named():
    fails_with(lesson01.effective_batch_size, lambda micro, k, replicas=1: micro * k,
               "effective_batch_size(16, 4, 2) gave 64, expected 128", "multiply by `replicas`")
    fails_with(lesson01.micro_batch_size_for, lambda effective, k, replicas=1: effective // k,
               "micro_batch_size_for(128, 4, 2) gave 32, expected 16", "divide by `replicas`")


def test_no_default_replica_count_is_named_at_the_learners_line():
    """Issue #60: the TypeError was reported at the checker's own line."""
    def no_default(micro, k, replicas):
        return micro * k * replicas

    def micro_no_default(effective, k, replicas):
        if effective % (k * replicas):
            raise ValueError(effective)
        return effective // (k * replicas)

    fails_with(lesson01.effective_batch_size, no_default, "TypeError",
               "def no_default(micro, k, replicas):", "`replicas` should default to 1")
    fails_with(lesson01.micro_batch_size_for, micro_no_default,
               "micro_batch_size_for(256, 8) raised TypeError", "def micro_no_default(")
    outcome = lesson01.effective_batch_size.evaluate(no_default)
    assert "!= 128" not in outcome.message  # the checker's own line, before


def test_a_float_effective_batch_is_named():
    fails_with(lesson01.effective_batch_size, lambda micro, k, replicas=1.0: micro * k * replicas,
               "effective_batch_size(32, 4) gave 128.0, a float")


def test_remainders_by_each_factor_miss_a_shared_one():
    """Issue #60: k and replicas each divide 48, their product 32 does not."""
    def by_each(effective, k, replicas=1):
        if effective % k or effective % replicas:
            raise ValueError(effective)
        return effective // (k * replicas)

    fails_with(lesson01.micro_batch_size_for, by_each, "micro_batch_size_for(48, 8, 4) returned 1",
               "8 and 4 each divide 48, but their product, 32, does not")


def test_a_remainder_by_k_alone_is_named():
    def without_parentheses(effective, k, replicas=1):
        if effective % k * replicas:
            raise ValueError(effective)
        return effective // (k * replicas)

    fails_with(lesson01.micro_batch_size_for, without_parentheses,
               "8 divides 256, but 8 × 3 = 24 does not", "`(e % k) * r`")


def test_a_float_batch_size_is_named():
    fails_with(lesson01.micro_batch_size_for, lambda e, k, replicas=1: e / (k * replicas),
               "gave 32.0, a float", "`//`")


def test_an_indivisible_effective_batch_must_raise():
    fails_with(lesson01.micro_batch_size_for, lambda e, k, replicas=1: e // (k * replicas),
               "micro_batch_size_for(250, 4, 1) returned 62", "should raise ValueError")


@pytest.mark.parametrize("exercise", [lesson01.effective_batch_size, lesson01.micro_batch_size_for])
def test_hints_do_not_give_the_answer_away(exercise, capsys):
    exercise.hint()
    exercise.solution()
    shown = capsys.readouterr().out
    assert "1 of" in shown and "%load solutions/01_batch_sizes.py" in shown
    assert "*" not in shown.split("Solution")[0]  # no formula in the first hint
