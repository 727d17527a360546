"""Lesson 01's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import sys

from gaviz.course import lesson01

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.01_batch_sizes")


def test_the_solution_passes():
    outcome = lesson01.batch_sizes.evaluate(solution.effective_batch_size,
                                            solution.micro_batch_size_for)
    assert outcome.status == "pass", outcome.message


def test_the_stubs_are_not_attempted():
    outcome = lesson01.batch_sizes.evaluate(lambda m, k, r=1: None, lambda e, k, r=1: None)
    assert outcome.status == "not attempted"


def test_replicas_forgotten_is_a_fault():
    outcome = lesson01.batch_sizes.evaluate(lambda m, k, r=1: m * k, solution.micro_batch_size_for)
    assert outcome.status == "fail" and "effective_batch_size(16, 4, 2) gave 64" in outcome.message


def test_floor_division_without_the_check_is_a_fault():
    outcome = lesson01.batch_sizes.evaluate(solution.effective_batch_size,
                                            lambda e, k, r=1: e // (k * r))
    assert outcome.status == "fail" and "(250, 4, 1) should raise ValueError" in outcome.message
