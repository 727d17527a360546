"""Lesson 05's checkers pass the solutions and name the usual mistakes."""

import importlib
import pathlib
import sys

import numpy as np
import tensorflow as tf

from gaviz.course import lesson05

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.05_window_loss")
micro_loss_solution = importlib.import_module("solutions.05_micro_loss")


def test_the_solutions_pass():
    outcome = lesson05.micro_loss.evaluate(micro_loss_solution.micro_loss)
    assert outcome.status == "pass", outcome.message
    assert lesson05.window_loss.evaluate(solution.window_loss).status == "pass"


def test_the_stubs_are_not_attempted():
    def micro_loss(loss, y, y_pred):
        ...  # your code here

    assert lesson05.micro_loss.evaluate(micro_loss).status == "not attempted"
    assert lesson05.window_loss.evaluate(lambda losses, weights: None).status == "not attempted"


def test_the_mean_counted_once_is_the_mean_of_means():
    outcome = lesson05.micro_loss.evaluate(lambda loss, y, y_pred: (loss(y, y_pred), 1.0))
    assert outcome.status == "fail" and "mean_of_means" in outcome.message
    assert "counted as one sample" in outcome.message


def test_the_mean_with_its_rows_is_named_not_dumped():
    """Issue #41: this printed diagnose's "3 defects", two of them "unexplained"."""
    def micro_loss(loss, y, y_pred):
        return loss(y, y_pred), float(tf.shape(y)[0])

    outcome = lesson05.micro_loss.evaluate(micro_loss)
    assert outcome.status == "fail", outcome
    assert "returns their mean, 4.667, and count 3" in outcome.message
    assert "Return the *sum*" in outcome.message and "unexplained" not in outcome.message


def test_the_sum_counted_once_names_the_count():
    def micro_loss(loss, y, y_pred):
        return tf.reduce_sum(loss.call(y, y_pred)), 1.0

    outcome = lesson05.micro_loss.evaluate(micro_loss)
    assert outcome.status == "fail" and "the same count, 1, for micro-batches of 3 and 5" in outcome.message


def test_returning_one_value_is_named_at_the_learners_line():
    """Issue #60: "Cannot iterate over a scalar tensor", with no line and no word of two values."""
    def micro_loss(loss, y, y_pred):
        return tf.reduce_sum(loss.call(y, y_pred))

    outcome = lesson05.micro_loss.evaluate(micro_loss)
    assert outcome.status == "fail", outcome
    assert "returned one value" in outcome.message and "return two" in outcome.message
    assert "def micro_loss(loss, y, y_pred):" in outcome.message
    assert "Cannot iterate" not in outcome.message


def test_the_pair_the_other_way_round_is_named():
    def micro_loss(loss, y, y_pred):
        return float(len(y)), tf.reduce_sum(loss.call(y, y_pred))

    outcome = lesson05.micro_loss.evaluate(micro_loss)
    assert outcome.status == "fail" and "the other way round" in outcome.message, outcome


def test_a_count_as_an_integer_tensor_passes():
    def micro_loss(loss, y, y_pred):
        return tf.reduce_sum(loss.call(y, y_pred)), tf.shape(y)[0]

    assert lesson05.micro_loss.evaluate(micro_loss).status == "pass"


def test_another_wrong_piece_is_named_by_diagnose():
    def micro_loss(loss, y, y_pred):
        return tf.reduce_sum(loss.call(y, y_pred)) / 2, float(tf.shape(y)[0])

    outcome = lesson05.micro_loss.evaluate(micro_loss)
    assert outcome.status == "fail" and "gaviz.diagnose finds" in outcome.message


def test_the_mean_of_means_window_loss_is_a_fault():
    def window_loss(losses, weights):
        return float(np.mean([np.sum(loss * w) / np.sum(w) for loss, w in zip(losses, weights)]))

    outcome = lesson05.window_loss.evaluate(window_loss)
    assert outcome.status == "fail" and "mean of the micro-batches' means" in outcome.message


def test_counting_padding_is_a_fault():
    def window_loss(losses, weights):
        return float(sum(np.sum(loss * w) for loss, w in zip(losses, weights)) /
                     sum(np.size(w) for w in weights))

    outcome = lesson05.window_loss.evaluate(window_loss)
    assert outcome.status == "fail" and "padding (weight 0) must not count" in outcome.message


def test_a_piece_that_breaks_the_gradient_names_its_error():
    def micro_loss(loss, y, y_pred):
        return np.sum(loss.call(y, y_pred)), float(len(y))  # NumPy: no gradient

    outcome = lesson05.micro_loss.evaluate(micro_loss)
    assert outcome.status == "fail", outcome
    assert outcome.message.startswith("lesson 03's loop with your micro_loss raised")
    assert "(line " in outcome.message  # the learner's, or their function's


def test_weights_other_than_0_and_1_weigh():
    def window_loss(losses, weights):
        return float(sum(np.sum(loss * w) for loss, w in zip(losses, weights)) /
                     sum(np.count_nonzero(w) for w in weights))

    outcome = lesson05.window_loss.evaluate(window_loss)
    assert outcome.status == "fail" and "weights 0.5 and 2" in outcome.message, outcome
