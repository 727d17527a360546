"""Lesson 07's checker passes the solution and names each fault of a broken attempt."""

import importlib
import math
import pathlib
import sys

from gaviz.course import lesson07

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.07_lr_scaling")


def test_the_solution_passes():
    assert lesson07.scaled_learning_rate.evaluate(solution.scaled_learning_rate).status == "pass"


def test_the_stub_is_not_attempted():
    def scaled_learning_rate(base_lr, base_batch, effective_batch, rule="linear"):
        return None

    assert lesson07.scaled_learning_rate.evaluate(scaled_learning_rate).status == "not attempted"


def test_sqrt_forgotten_is_a_fault():
    def scaled_learning_rate(base_lr, base_batch, effective_batch, rule="linear"):
        return base_lr * effective_batch / base_batch

    outcome = lesson07.scaled_learning_rate.evaluate(scaled_learning_rate)
    assert outcome.status == "fail" and "rule='sqrt') should be 0.2, got 0.4" in outcome.message


def test_bad_input_accepted_is_a_fault():
    def scaled_learning_rate(base_lr, base_batch, effective_batch, rule="linear"):
        ratio = effective_batch / base_batch
        return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))

    outcome = lesson07.scaled_learning_rate.evaluate(scaled_learning_rate)
    assert outcome.status == "fail" and "{'rule': 'cubic'} should raise ValueError" in outcome.message


def test_a_batch_of_zero_accepted_is_a_fault():
    def scaled_learning_rate(base_lr, base_batch, effective_batch, rule="linear"):
        if rule not in ("linear", "sqrt"):
            raise ValueError(rule)
        ratio = effective_batch / base_batch
        return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))

    outcome = lesson07.scaled_learning_rate.evaluate(scaled_learning_rate)
    assert outcome.status == "fail"
    assert "{'effective_batch': 0} should raise ValueError" in outcome.message
