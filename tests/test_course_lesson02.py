"""Lesson 02's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import sys

import tensorflow as tf

from gaviz.course import lesson02

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.02_train_step")


def test_the_solution_passes():
    outcome = lesson02.train_step.evaluate(solution.make_train_step)
    assert outcome.status == "pass", outcome.message


def test_the_stub_is_not_attempted():
    assert lesson02.train_step.evaluate(lambda m, o, l: None).status == "not attempted"


def test_an_eager_step_is_a_fault():
    def make_train_step(model, optimizer, loss_fn):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                          model.trainable_variables))
            return loss
        return step

    outcome = lesson02.train_step.evaluate(make_train_step)
    assert outcome.status == "fail" and "not a tf.function" in outcome.message


def test_a_step_that_forgets_to_apply_is_a_fault():
    def make_train_step(model, optimizer, loss_fn):
        @tf.function
        def step(x, y):
            return loss_fn(y, model(x, training=True))
        return step

    outcome = lesson02.train_step.evaluate(make_train_step)
    assert outcome.status == "fail" and "did not move by the mean-loss gradient" in outcome.message
