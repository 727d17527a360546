"""Lesson 03's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import sys

import tensorflow as tf

from gaviz.course import lesson03

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.03_window")


def test_the_solution_passes():
    outcome = lesson03.window.evaluate(solution.accumulate, solution.finish_window)
    assert outcome.status == "pass", outcome.message


def test_the_stubs_are_not_attempted():
    outcome = lesson03.window.evaluate(lambda a, g: None, lambda a, c: None)
    assert outcome.status == "not attempted"


def test_a_window_divided_but_not_reset_is_a_fault():
    def finish_window(accumulators, sample_count):
        return [tf.math.divide_no_nan(a.read_value(), float(sample_count)) for a in accumulators]

    outcome = lesson03.window.evaluate(solution.accumulate, finish_window)
    assert outcome.status == "fail" and "reset the accumulators to zero" in outcome.message


def test_an_empty_window_giving_nan_is_a_fault():
    def finish_window(accumulators, sample_count):
        gradients = [a.read_value() / float(sample_count) for a in accumulators]
        for a in accumulators:
            a.assign(tf.zeros_like(a))
        return gradients

    outcome = lesson03.window.evaluate(solution.accumulate, finish_window)
    assert outcome.status == "fail" and "zeros, not NaN" in outcome.message


def test_accumulate_without_the_length_check_is_a_fault():
    def accumulate(accumulators, gradients):
        for a, g in zip(accumulators, gradients):
            a.assign_add(g)
        return accumulators

    outcome = lesson03.window.evaluate(accumulate, solution.finish_window)
    assert outcome.status == "fail" and "differ in length" in outcome.message
