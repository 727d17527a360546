"""Lesson 04's checkers pass the solutions and name the usual mistakes."""

import importlib
import pathlib
import sys

import tensorflow as tf

from gaviz.course import lesson04

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.04_reset")
growth_solution = importlib.import_module("solutions.04_update_norms_grow")


def test_the_solutions_pass():
    assert lesson04.reset.evaluate(solution.reset).status == "pass"
    assert lesson04.update_norms_grow.evaluate(growth_solution.update_norms_grow).status == "pass"


def test_the_stubs_are_not_attempted():
    assert lesson04.reset.evaluate(lambda accumulators: None).status == "not attempted"
    assert lesson04.update_norms_grow.evaluate(lambda norms, factor=2.0: None).status == \
        "not attempted"


def test_a_reset_that_replaces_the_entries_is_a_fault():
    def reset(accumulators):
        for i, a in enumerate(accumulators):
            accumulators[i] = tf.Variable(tf.zeros_like(a))

    outcome = lesson04.reset.evaluate(reset)
    assert outcome.status == "fail" and "in place" in outcome.message


def test_rebinding_instead_of_assigning_is_a_fault_not_a_stub():
    """Issue #41: code that rebinds a name was reported as "not attempted"."""
    def reset(accumulators):
        accumulators = [tf.zeros_like(a) for a in accumulators]  # noqa: F841 - the fault

    def reset_each(accumulators):
        for accumulator in accumulators:
            accumulator = tf.zeros_like(accumulator)  # noqa: F841 - the fault

    for wrong in (reset, reset_each):
        outcome = lesson04.reset.evaluate(wrong)
        assert outcome.status == "fail", outcome
        assert "your reset ran, but every accumulator still holds" in outcome.message
        assert "in place" in outcome.message


def test_a_reset_of_the_first_accumulator_only_is_a_fault():
    def reset(accumulators):
        accumulators[0].assign(tf.zeros_like(accumulators[0]))

    outcome = lesson04.reset.evaluate(reset)
    assert outcome.status == "fail" and "2 of 3 accumulators are not zero" in outcome.message


def test_rising_without_the_factor_is_a_fault():
    def update_norms_grow(norms, factor=2.0):
        return all(b > a for a, b in zip(norms, norms[1:]))

    outcome = lesson04.update_norms_grow.evaluate(update_norms_grow)
    assert outcome.status == "fail" and "under 2x the first" in outcome.message


def test_emptying_the_list_is_named():
    outcome = lesson04.reset.evaluate(lambda accumulators: accumulators.clear())
    assert outcome.status == "fail" and "emptied the list" in outcome.message, outcome


def test_growth_is_a_ratio_at_any_scale():
    def by_difference(norms, factor=2.0):
        if len(norms) < 2:
            raise ValueError(norms)
        return all(b > a for a, b in zip(norms, norms[1:])) and norms[-1] - norms[0] >= factor

    outcome = lesson04.update_norms_grow.evaluate(by_difference)
    assert outcome.status == "fail" and "a ratio, not a difference" in outcome.message, outcome
