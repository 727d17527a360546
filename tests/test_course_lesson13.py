"""The capstone's corpus, model and exercise: the corpus is the same lines on every call and
needs nothing but this Python; the checker passes the solution, says "not attempted" for the
lesson's stub, and names each fault of a realistic wrong window; the solution, gaviz's trainer
and the big-batch reference agree, while Keras's built-in `gradient_accumulation_steps` lands
measurably away from them on real tokens."""

import importlib
import pathlib
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import gaviz
from gaviz.course import corpus, language_model, lesson13, make_accumulators, max_difference
from gaviz.course.graph import run_windows

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.13_token_window")
lesson08 = importlib.import_module("solutions.08_graph_trainer")

EXERCISE = lesson13.tokens


def window_maker(masked=True, divisor="tokens"):
    """make_token_window as a learner might write it: the solution, or it with one change."""

    def make_token_window(model, optimizer, loss, element_spec):
        variables = model.trainable_variables
        accumulators = make_accumulators(variables)
        count = tf.Variable(0.0, trainable=False)
        means = tf.Variable(0.0, trainable=False)  # micro-batches, for "micro-batch means"
        optimizer.build(variables)

        def micro_step(x, y):
            real = tf.cast(x != 0, tf.float32)
            with tf.GradientTape() as tape:
                per_token = loss.call(y, model(x, training=True))
                summed = tf.reduce_sum(per_token * real if masked else per_token)
                if divisor == "micro-batch means":  # PITFALL: each micro-batch its own mean
                    summed = summed / tf.reduce_sum(real)
            for accumulator, gradient in zip(accumulators, tape.gradient(summed, variables)):
                accumulator.assign_add(tf.convert_to_tensor(gradient))
            count.assign_add({"tokens": tf.reduce_sum(real),
                              "positions": tf.cast(tf.size(real), tf.float32),
                              "samples": tf.cast(tf.shape(x)[0], tf.float32),
                              "nothing": 0.0, "micro-batch means": 1.0}[divisor])

        def update():
            divide_by = tf.maximum(count, 1.0)  # "nothing": count stays 0, divide by 1
            optimizer.apply_gradients(zip([a / divide_by for a in accumulators], variables))
            for accumulator in accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
            count.assign(0.0)

        @tf.function
        def window(iterator, accumulation_steps):
            consumed = tf.constant(0)
            for _ in tf.range(accumulation_steps):
                batch = iterator.get_next_as_optional()
                tf.cond(batch.has_value(), lambda: micro_step(*batch.get_value()), lambda: None)
                consumed += tf.cast(batch.has_value(), tf.int32)
            tf.cond(consumed > 0, update, lambda: None)
            return consumed

        return window

    return make_token_window


def test_the_solution_passes():
    outcome = EXERCISE.evaluate(solution.make_token_window)
    assert outcome.status == "pass", outcome.message
    assert "4 windows (the last one partial) on 40 padded lines" in outcome.message


def test_the_wrong_windows_differ_from_a_passing_one_by_their_one_change():
    assert EXERCISE.evaluate(window_maker()).status == "pass"


def test_the_lessons_stub_is_not_attempted():
    def make_token_window(model, optimizer, loss, element_spec):
        ...  # your code here

    assert EXERCISE.evaluate(make_token_window).status == "not attempted"


@pytest.mark.parametrize("masked, divisor, named", [
    (True, "samples", "normalized by samples: the update divides"),
    (True, "micro-batch means", "normalized by micro-batch means: each micro-batch"),
    (True, "nothing", "never divided"),
    (False, "tokens", "padding counted: the padded positions' losses are in the window's sum"),
    (False, "positions", "padding counted: the window's sum holds the padded positions' losses"),
])
def test_each_fault_is_named(masked, divisor, named):
    outcome = EXERCISE.evaluate(window_maker(masked, divisor))
    assert outcome.status == "fail" and named in outcome.message, outcome.message
    assert "differ from the big batch's by" in outcome.message


def test_lesson_08s_window_unchanged_is_named():
    outcome = EXERCISE.evaluate(lesson08.make_window)
    assert outcome.status == "fail", outcome.message
    assert "lesson 08's window as it was" in outcome.message, outcome.message


def test_hints_do_not_give_the_answer_away():
    whole = "\n".join(EXERCISE.hints)
    assert len(EXERCISE.hints) >= 3 and "def window" not in whole and "apply_gradients" not in whole
