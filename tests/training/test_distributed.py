"""Exact accumulation under tf.distribute, with one all-reduce per update.

MirroredStrategy runs on two logical CPU devices, and MultiWorkerMirrored
on two worker processes on 127.0.0.1; both in subprocesses, because logical
devices and TF_CONFIG must be set before TensorFlow starts.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
from helpers import assert_same_recorded_weights, assert_same_weights
from reference import group_windows, micro_batches, train_big_batches

import gaviz

HERE = pathlib.Path(__file__).resolve().parent
TIMEOUT = 300  # seconds; every subprocess is killed past it
WINDOW_ROWS = 3 * 8  # k global micro-batches of 8: the terms of one big-batch gradient


def run_python(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen(
        [sys.executable, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )


def finish(process):
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"subprocess timed out:\n{err[-3000:]}")
    assert process.returncode == 0, err[-3000:]
    return out


@pytest.fixture(scope="module")
def mirrored():
    out = finish(run_python(HERE / "distributed" / "mirrored_run.py"))
    line = next(text for text in out.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_mirrored_matches_single_device_big_batches(mirrored):
    assert mirrored["replicas"] == 2
    for case in mirrored["cases"]:
        assert case["updates"] == case["reference_updates"] == case["iterations"], case
        assert_same_recorded_weights(case["weights"], terms=WINDOW_ROWS)
        assert case["max_loss_difference"] < 1e-5, case
        assert case["tracing_count"] == 1
        # Per-replica micro-batch 4 x 3 steps x 2 replicas.
        assert case["effective_batch_size_per_replica_4"] == 24
    flush = next(c for c in mirrored["cases"] if c["tail"] == "flush")
    # 101 samples: the last global micro-batch (5) splits unevenly, 3 and 2.
    assert flush["window_samples"][:5] == [24, 24, 24, 24, 5]
    carry = next(c for c in mirrored["cases"] if c["tail"] == "carry")
    assert 21 in carry["window_samples"]  # a window that spans two epochs


def test_mirrored_reduces_once_per_window_outside_the_loop(mirrored):
    graphs = [graph for _, graph in mirrored["reductions"] if graph != "eager"]
    # One trace per trainer (three cases), one reduction in each, built by
    # the window (once per window): none in the micro-step loop.
    assert graphs == ["_window"] * 3, mirrored["reductions"]


def test_mirrored_arrays_match_single_device_big_batches(mirrored):
    assert_same_recorded_weights(mirrored["arrays_weights"], terms=WINDOW_ROWS)


def test_every_pitfall_refuses_several_replicas(mirrored):
    refusals = mirrored["pitfall_refusals"]
    assert set(refusals) == set(gaviz.PITFALLS)
    for name, message in refusals.items():
        assert message and "`strategy` must have one replica" in message, name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_multi_worker_matches_single_device_big_batches(tmp_path):
    ports = [free_port(), free_port()]
    outs = [tmp_path / f"worker{i}.json" for i in range(2)]
    workers = [
        run_python(HERE / "distributed" / "multi_worker_run.py", *ports, i, outs[i])
        for i in range(2)
    ]
    for worker in workers:
        finish(worker)
    results = [json.loads(out.read_text()) for out in outs]

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(100, 1))).astype("float32")
    keras.utils.set_random_seed(1)
    reference = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    windows = group_windows(micro_batches(x, y, [8] * 12 + [4]), 3, "flush", 2)
    ref_losses = train_big_batches(
        reference, keras.optimizers.Adam(0.01), keras.losses.mean_squared_error, windows
    )
    for result in results:
        assert result["replicas"] == 2
        # Calls that grew with each worker's own timing deadlocked the
        # workers' collectives; with two workers "auto" stays one window.
        assert result["workers"] == 2
        assert result["windows_per_call_after_fit"] == 1
        assert result["window_samples"] == [24, 24, 24, 24, 4] * 2
        np.testing.assert_allclose(result["loss"], ref_losses, rtol=1e-5)
        start = [np.array(w, "float32") for w in result["start"]]
        assert_same_weights([np.array(w, "float32") for w in result["weights"]], reference,
                            start, terms=WINDOW_ROWS)
        # One float all-reduce (every gradient and sum, packed) per window; the
        # micro-step loop holds only the iterator's integer end-of-data agreement.
        assert result["collectives_outside_loop"] == ["CollectiveReduceV2:float32"]
        assert not [op for op in result["collectives_in_loop"] if "float" in op]
        # gaviz.Accumulator in a custom loop, the same windows: the same weights,
        # and no float traffic on a micro-step; an update all-reduces the count
        # (packed with a finiteness flag) and the optimizer the gradient.
        assert_same_weights([np.array(w, "float32") for w in result["accumulator_weights"]],
                            reference, start, terms=WINDOW_ROWS)
        assert result["accumulator_collectives_per_micro_step"] == []
        assert result["accumulator_collectives_in_update"] == ["CollectiveReduceV2"] * 2


# ------------------------------------------------- gaviz.Accumulator, MirroredStrategy


@pytest.fixture(scope="module")
def accumulator_cases():
    out = finish(run_python(HERE / "distributed" / "accumulator_run.py"))
    line = next(text for text in out.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_accumulator_step_inside_strategy_run_equals_the_big_batch(accumulator_cases):
    case = accumulator_cases["step_in_replica_context"]
    assert accumulator_cases["replicas"] == 2
    assert_same_recorded_weights(case["weights"], terms=WINDOW_ROWS)
    # 6 global micro-batches, k = 3: updates at the 3rd and the 6th.
    assert case["said"] == [False, False, True, False, False, True]
    assert case["iterations"] == 2


def test_accumulator_takes_an_empty_replica_share(accumulator_cases):
    # A last global micro-batch of one row leaves one replica nothing (count 0).
    assert_same_recorded_weights(accumulator_cases["an_empty_replica_share"]["weights"],
                                 terms=WINDOW_ROWS)


def test_accumulator_add_inside_apply_after_strategy_run(accumulator_cases):
    case = accumulator_cases["add_then_apply"]
    assert_same_recorded_weights(case["weights"], terms=WINDOW_ROWS)
    assert case["iterations"] == 2


def test_accumulator_in_a_train_step_under_model_fit_and_mirrored(accumulator_cases):
    case = accumulator_cases["train_step_under_model_fit"]
    assert_same_recorded_weights(case["weights"], terms=WINDOW_ROWS)
    assert case["iterations"] == 4  # two windows an epoch, the second flushed
    np.testing.assert_allclose(case["val_loss"], case["expected_val_loss"], rtol=1e-5)
    # Where Keras's own option fails, in the same process (keras-team/keras#20582).
    assert "merge_call" in accumulator_cases["keras_built_in_under_model_fit"]["error"]


def test_accumulator_skips_a_window_any_replica_overflowed(accumulator_cases):
    case = accumulator_cases["loss_scale_skips_a_window_one_replica_overflowed"]
    assert_same_recorded_weights(case["clean_weights"], terms=WINDOW_ROWS)
    assert case["iterations"] == 1  # the poisoned window was not applied
    assert case["scale_after"] == case["scale_before"] / 2
    assert case["moved"] == 0 and case["micro_steps_in_window"] == 0


def test_accumulator_refuses_what_it_cannot_do_exactly_with_replicas(accumulator_cases):
    said = accumulator_cases["refusals"]
    assert "`optimizer` clips gradients (clipnorm) under a strategy of 2 replicas" in said["clipping"]
    assert "must be called in replica context" in said["cross_replica_add"]
    assert "`variables` must be created under the accumulator's strategy" in said["outside_scope"]


# ------------------------------------------- sparse gradients, MirroredStrategy


@pytest.fixture(scope="module")
def sparse_cases():
    out = finish(run_python(HERE / "distributed" / "sparse_run.py"))
    line = next(text for text in out.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


SPARSE_WINDOW_ROWS = 3 * 8  # k global micro-batches of 8


def test_an_embedding_under_mirrored_equals_model_fit_under_it(sparse_cases):
    """Each replica keeps its window's occurrences; they are gathered side by
    side, as Keras's optimizer all-reduces Model.fit's per-replica slices."""
    assert sparse_cases["replicas"] == 2
    for name, case in sparse_cases["trainer"].items():
        assert case["sparse"] == [0], name
        assert_same_recorded_weights(case["weights"], terms=SPARSE_WINDOW_ROWS)
        np.testing.assert_allclose(case["loss"], case["expected_loss"], rtol=1e-5, err_msg=name)


def test_an_own_loop_under_mirrored_equals_model_fit_under_it(sparse_cases):
    case = sparse_cases["accumulator"]
    assert case["sparse"] == [0] and case["iterations"] == 8  # 4 windows an epoch, the last flushed
    assert_same_recorded_weights(case["weights"], terms=SPARSE_WINDOW_ROWS)
