"""Lesson 09's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import statistics
import sys
import time

from gaviz.course import lesson09

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.09_timing")


def _timed(fit_once, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit_once()
        times.append(time.perf_counter() - start)
    return times


def test_the_solution_passes():
    assert lesson09.median_epoch_seconds.evaluate(solution.median_epoch_seconds).status == "pass"


def test_the_stub_is_not_attempted():
    outcome = lesson09.median_epoch_seconds.evaluate(lambda fit_once, repeats: None)
    assert outcome.status == "not attempted"


def test_no_warm_up_is_a_fault():
    outcome = lesson09.median_epoch_seconds.evaluate(
        lambda fit_once, repeats: statistics.median(_timed(fit_once, repeats)))
    assert outcome.status == "fail" and "got 3 calls" in outcome.message


def test_the_mean_is_a_fault():
    def mean_after_warm_up(fit_once, repeats):
        fit_once()
        return statistics.mean(_timed(fit_once, repeats))

    outcome = lesson09.median_epoch_seconds.evaluate(mean_after_warm_up)
    assert outcome.status == "fail" and "is the mean of the timed calls" in outcome.message
