"""The exercise solution of lesson 10 does what its exercise asks.

Each is checked against an independent computation: known sleep durations,
the trainer's own effective batch, a real training run, hand-worked numbers.
"""

import importlib
import pathlib
import sys

import keras
import pytest

import gaviz

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))

replicas = importlib.import_module("solutions.10_replicas")


@pytest.mark.parametrize("micro, steps, n", [(16, 4, 2), (4, 16, 8), (32, 1, 1), (3, 5, 7)])
def test_batch_sizes_with_replicas(micro, steps, n):
    assert replicas.global_batch_size(micro, n) == micro * n
    assert replicas.effective_batch_size(micro, steps, n) == micro * steps * n


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_effective_batch_size_agrees_with_the_trainer(steps):
    trainer = gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0, hidden=4),
                                        keras.optimizers.SGD(0.1), "mse", steps)
    assert replicas.effective_batch_size(16, steps, trainer.num_replicas) == \
        trainer.effective_batch_size(16)


def test_batch_sizes_reject_bad_input():
    for bad in [(0, 2), (16, 0), (-4, 2), (16.0, 2), (True, 2)]:
        with pytest.raises(ValueError):
            replicas.global_batch_size(*bad)
    for bad in [(16, 0, 2), (16, 4, 0), (0, 4, 2), (16, 2.0, 2)]:
        with pytest.raises(ValueError):
            replicas.effective_batch_size(*bad)
