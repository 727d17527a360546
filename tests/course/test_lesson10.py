"""Lesson 10's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import sys

import keras
import pytest
import tensorflow as tf

from gaviz.course import lesson10

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.10_replica_step")
MSE = keras.losses.MeanSquaredError(reduction="none")


def replica_step_maker(count="rows", loss="average"):
    """make_replica_step as a learner might write it: the solution, or it with one change."""

    def make_replica_step(model, accumulator):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_sample = MSE(y, model(x, training=True))
                value = {"sum": lambda: tf.reduce_sum(per_sample),
                         "average": lambda: tf.nn.compute_average_loss(per_sample),
                         "global": lambda: tf.nn.compute_average_loss(  # PITFALL when chosen
                             per_sample, global_batch_size=8)}[loss]()
            gradients = tape.gradient(value, model.trainable_variables)
            if count == "none":
                accumulator.step(gradients)  # PITFALL when chosen: no count
                return
            accumulator.step(gradients, count={"rows": tf.shape(x)[0], "one": 1.0}[count])

        return replica_step

    return make_replica_step


def test_the_solution_passes_on_one_replica():
    outcome = lesson10.replica_step.evaluate(solution.make_replica_step)
    assert outcome.status == "pass", outcome.message
    assert "1 replica, 3 updates" in outcome.message and "lesson's two replicas" in outcome.message


def test_the_stub_is_not_attempted():
    def make_replica_step(model, accumulator):
        ...  # your code here

    assert lesson10.replica_step.evaluate(make_replica_step).status == "not attempted"


def test_a_count_of_one_is_the_mean_of_means_in_the_ragged_window():
    outcome = lesson10.replica_step.evaluate(replica_step_maker(count="one"))
    assert outcome.status == "fail", outcome
    assert "micro-batches of 8 and 3 rows, is off" in outcome.message
    assert "count this replica's own rows" in outcome.message


def test_a_summed_loss_is_named():
    outcome = lesson10.replica_step.evaluate(replica_step_maker(loss="sum"))
    assert outcome.status == "fail" and "8.00x the big batch's" in outcome.message


def test_a_loss_divided_by_a_fixed_global_batch_is_named_not_the_count():
    """Issue #60: compute_average_loss(global_batch_size=8) was told its count was wrong."""
    outcome = lesson10.replica_step.evaluate(replica_step_maker(loss="global"))
    assert outcome.status == "fail", outcome
    assert "divided by a fixed 8" in outcome.message and "`count` is right" in outcome.message


def test_a_step_without_its_count_is_said_without_autographs_names():
    outcome = lesson10.replica_step.evaluate(replica_step_maker(count="none"))
    assert outcome.status == "fail", outcome
    assert "step() missing 1 required positional argument: 'count'" in outcome.message
    assert "<locals>" not in outcome.message and "tf__" not in outcome.message


TWO_REPLICAS = """
import json, os, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import gaviz.quiet, keras
sys.path.insert(0, sys.argv[1])
from gaviz.course import lesson10
import importlib
solution = importlib.import_module("solutions.10_replica_step")
mse = keras.losses.MeanSquaredError(reduction="none")

def make_undivided(model, accumulator):  # a mean over this replica's rows, not the replicas'
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(mse(y, model(x, training=True)))
        accumulator.step(tape.gradient(loss, model.trainable_variables), count=tf.shape(x)[0])
    return replica_step

def make_count_one(model, accumulator):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(mse(y, model(x, training=True)))
        accumulator.step(tape.gradient(loss, model.trainable_variables), count=1.0)
    return replica_step

def make_global_eight(model, accumulator):  # the loss over a fixed 8 rows, the shares' own counts
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(mse(y, model(x, training=True)), global_batch_size=8)
        accumulator.step(tape.gradient(loss, model.trainable_variables), count=tf.shape(x)[0])
    return replica_step

outcomes = {name: lesson10.replica_step.evaluate(maker) for name, maker in
            [("solution", solution.make_replica_step), ("undivided", make_undivided),
             ("one", make_count_one), ("global", make_global_eight)]}
print("RESULT " + json.dumps({name: [o.status, o.message] for name, o in outcomes.items()}))
"""


@pytest.fixture(scope="module")
def on_two_replicas():
    """The check's outcomes in a process with two logical CPUs, as the lesson's kernel has."""
    import json
    import os
    import subprocess

    lessons = str(pathlib.Path(__file__).resolve().parents[2] / "lessons")
    done = subprocess.run([sys.executable, "-c", TWO_REPLICAS, lessons], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(text for text in done.stdout.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_on_two_replicas_the_solution_passes(on_two_replicas):
    status, message = on_two_replicas["solution"]
    assert status == "pass" and message.startswith("2 replicas, 3 updates"), message


def test_on_two_replicas_a_loss_not_divided_by_the_replicas_is_named(on_two_replicas):
    status, message = on_two_replicas["undivided"]
    assert status == "fail" and "2.00x the big batch's" in message, message
    assert "compute_average_loss" in message


def test_on_two_replicas_a_count_of_one_names_the_uneven_split(on_two_replicas):
    status, message = on_two_replicas["one"]
    assert status == "fail" and "the 3 split 2 and 1 over the replicas" in message, message


def test_on_two_replicas_a_fixed_global_batch_size_is_named(on_two_replicas):
    status, message = on_two_replicas["global"]
    assert status == "fail" and "divided by a fixed 8" in message, message


def test_the_classic_distributed_loop_is_the_mean_of_means_and_the_accumulator_the_big_batch():
    """The lesson's own-loop section, on its data and sizes, in a subprocess with two logical
    CPUs: the classic loop (gradient / k into sums, apply_gradients after strategy.run) lands
    on Keras's built-in (sum / k, the mean of micro-batch means) and about 2e-2 from the big
    batch on one device; gaviz.Accumulator's step in its place lands on the big batch."""
    import json
    import os
    import subprocess

    script = pathlib.Path(__file__).resolve().parent / "lesson10_loops.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(text for text in done.stdout.splitlines() if text.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["replicas"] == 2
    assert result["classic_updates"] == result["accumulator_updates"] == 16
    assert result["classic_vs_builtin"] < 1e-5, result
    assert 1e-2 < result["classic_gap"] and result["classic_gap"] > 0.1 * result["moved"], result
    assert result["accumulator_gap"] < 1e-5, result
