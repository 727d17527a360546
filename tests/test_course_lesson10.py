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


def test_the_classic_distributed_loop_is_the_mean_of_means_and_the_accumulator_the_big_batch():
    """The lesson's own-loop section, on its data and sizes, in a subprocess with two logical
    CPUs: the classic loop (gradient / k into sums, apply_gradients after strategy.run) lands
    on Keras's built-in (sum / k, the mean of micro-batch means) and about 2e-2 from the big
    batch on one device; gaviz.Accumulator's step in its place lands on the big batch."""
    import json
    import os
    import subprocess

    script = pathlib.Path(__file__).resolve().parent / "distributed" / "lesson10_loops.py"
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
