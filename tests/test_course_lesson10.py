"""Lesson 10's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import sys

from gaviz.course import lesson10

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.10_replicas")


def test_the_solution_passes():
    outcome = lesson10.batch_sizes.evaluate(solution.global_batch_size,
                                            solution.effective_batch_size)
    assert outcome.status == "pass", outcome.message


def test_the_stubs_are_not_attempted():
    outcome = lesson10.batch_sizes.evaluate(lambda m, r: None, lambda m, k, r: None)
    assert outcome.status == "not attempted"


def test_replicas_forgotten_in_the_effective_batch_is_a_fault():
    outcome = lesson10.batch_sizes.evaluate(solution.global_batch_size, lambda m, k, r: m * k)
    assert outcome.status == "fail" and "micro-batch x accumulation steps x replicas" in \
        outcome.message


def test_bad_input_accepted_is_a_fault():
    outcome = lesson10.batch_sizes.evaluate(lambda m, r: m * r, solution.effective_batch_size)
    assert outcome.status == "fail" and "should raise ValueError" in outcome.message


def test_a_plan_prints_for_people():
    from gaviz.course import gpu

    plan = gpu.Plan(big_batch=8192, micro_batch_size=512, accumulation_steps=16,
                    need_bytes=134184960.0)
    assert str(plan) == ("a big batch of 8,192 needs about 128 MiB; "
                         "the same update: 16 micro-batches of 512")
