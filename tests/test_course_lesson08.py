"""Lesson 08's checker passes the solution, and names the fault of a trainer that takes its
micro-batches in Python, of an eager one, and of one that forgets the partial window."""

import importlib
import pathlib
import sys

import tensorflow as tf

from gaviz.course import accumulation_epoch, lesson08, make_accumulators, penalty_gradients

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.08_graph_trainer")


def test_the_solution_passes():
    outcome = lesson08.graph_trainer.evaluate(solution.make_graph_trainer)
    assert outcome.status == "pass", outcome.message


def test_the_stub_is_not_attempted():
    def make_graph_trainer(model, optimizer, loss, accumulation_steps):
        raise NotImplementedError

    assert lesson08.graph_trainer.evaluate(make_graph_trainer).status == "not attempted"


def test_one_graph_call_per_micro_step_is_a_fault():
    def make_graph_trainer(model, optimizer, loss, accumulation_steps):
        variables = model.trainable_variables
        accumulators, count = make_accumulators(variables), tf.Variable(0.0)

        @tf.function
        def micro_step(x, y):
            with tf.GradientTape() as tape:
                loss_sum = tf.reduce_sum(loss.call(y, model(x, training=True)))
            for a, g in zip(accumulators, tape.gradient(loss_sum, variables)):
                a.assign_add(g)
            count.assign_add(tf.cast(tf.shape(x)[0], tf.float32))

        @tf.function
        def apply_window():
            grads = [a / count + p for a, p in zip(accumulators, penalty_gradients(model))]
            optimizer.apply_gradients(zip(grads, variables))
            for a in accumulators:
                a.assign(tf.zeros_like(a))
            count.assign(0.0)

        def train_epoch(micro_batches):
            updates = steps = 0
            for steps, (x, y) in enumerate(micro_batches, start=1):
                micro_step(x, y)
                if steps % accumulation_steps == 0:
                    apply_window()
                    updates += 1
            if steps % accumulation_steps:
                apply_window()
                updates += 1
            return updates

        return train_epoch

    outcome = lesson08.graph_trainer.evaluate(make_graph_trainer)
    assert outcome.status == "fail"
    assert "46 micro-batches were taken from the dataset in Python" in outcome.message


def test_the_eager_loop_is_a_fault_naming_python():
    def make_graph_trainer(model, optimizer, loss, accumulation_steps):
        return lambda micro_batches: accumulation_epoch(model, optimizer, loss, micro_batches,
                                                        accumulation_steps)

    outcome = lesson08.graph_trainer.evaluate(make_graph_trainer)
    assert outcome.status == "fail"
    assert "micro-batches were taken from the dataset in Python" in outcome.message


def test_a_forgotten_partial_window_is_a_fault():
    def make_graph_trainer(model, optimizer, loss, accumulation_steps):
        train_epoch = solution.make_graph_trainer(model, optimizer, loss, accumulation_steps)
        return lambda micro_batches: train_epoch(micro_batches.take(
            len(micro_batches) // accumulation_steps * accumulation_steps))

    outcome = lesson08.graph_trainer.evaluate(make_graph_trainer)
    assert outcome.status == "fail" and "should report 6 updates" in outcome.message
