"""Lesson 02's checker passes the solution, calls the stub not attempted, and
names the fault of realistic wrong training steps."""

import importlib
import pathlib
import sys

import tensorflow as tf

from gaviz.course import lesson02

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.02_train_step")


def stub(model, optimizer, loss_fn):
    ...  # your code here


def fails_with(answer, *expected):
    outcome = lesson02.train_step.evaluate(answer)
    assert outcome.status == "fail", outcome
    for text in expected:
        assert text in outcome.message, outcome.message


def test_the_solution_passes():
    outcome = lesson02.train_step.evaluate(solution.make_train_step)
    assert outcome.status == "pass", outcome


def test_the_stub_is_not_attempted():
    assert lesson02.train_step.evaluate(stub).status == "not attempted"


def make_step(objective=lambda loss_fn, y, p: loss_fn(y, p), apply=True, compile=True,
              after=False):
    """The solution with one change."""
    def make_train_step(model, optimizer, loss_fn):
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = objective(loss_fn, y, model(x, training=True))
            gradients = tape.gradient(loss, model.trainable_variables)
            if apply:
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss_fn(y, model(x)) if after else loss
        return tf.function(train_step) if compile else train_step
    return make_train_step


def test_a_plain_python_step_is_named():
    fails_with(make_step(compile=False), "plain Python function", "tf.function")


def test_a_step_that_does_not_apply_is_named():
    fails_with(make_step(apply=False), "the weights did not change", "apply_gradients")


def test_the_summed_loss_gradient_is_named():
    summed = make_step(objective=lambda loss_fn, y, p: tf.reduce_sum(loss_fn.call(y, p)))
    fails_with(summed, "8 times too large", "summed loss")


def test_returning_the_loss_after_the_update_is_named():
    fails_with(make_step(after=True), "the loss after the update")


def test_a_step_training_another_model_is_named():
    """A notebook holds a `model` of its own: a step that trains it leaves the given one as it
    was, which read as a missing apply_gradients."""
    import keras

    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])

    def make_train_step(model, optimizer, loss_fn):
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, other(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, other.trainable_variables),
                                          other.trainable_variables))
            return loss
        return train_step

    fails_with(make_train_step, "trained another model", "the `model` make_train_step was given")


def test_a_step_with_an_optimizer_of_its_own_is_named():
    import keras

    def make_train_step(model, optimizer, loss_fn):
        own = keras.optimizers.SGD(0.05)
        return make_step()(model, own, loss_fn)

    fails_with(make_train_step, "moved 0.5 times", "another learning rate")


def test_the_hints_come_without_the_solution(capsys):
    lesson02.train_step.hint()
    assert "1 of 3" in capsys.readouterr().out
