"""Lesson 10's exercise: batch sizes with replicas."""

import keras

import gaviz
from gaviz.course.exercise import Exercise, Incorrect, NotAttempted

#: (per-replica micro-batch, accumulation steps, replicas) -> (global batch, effective batch)
_CASES = [((16, 4, 2), (32, 128)), ((4, 16, 8), (32, 512)), ((32, 1, 1), (32, 32)),
          ((3, 5, 7), (21, 105))]
_BAD = [(0, 2), (16, -1), (16.0, 2), (True, 2)]


def _check_batch_sizes(global_batch_size, effective_batch_size) -> str:
    if global_batch_size(16, 2) is None or effective_batch_size(16, 4, 2) is None:
        raise NotAttempted("global_batch_size or effective_batch_size still returns None")
    for (micro, steps, replicas), (global_batch, effective) in _CASES:
        if global_batch_size(micro, replicas) != global_batch:
            raise Incorrect(f"global_batch_size({micro}, {replicas}) should be {global_batch}: "
                            "the strategy splits each batch across the replicas")
        if effective_batch_size(micro, steps, replicas) != effective:
            raise Incorrect(f"effective_batch_size({micro}, {steps}, {replicas}) should be "
                            f"{effective}: micro-batch x accumulation steps x replicas")
    trainer = gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0), keras.optimizers.SGD(0.1),
                                        "mse", accumulation_steps=6)
    if effective_batch_size(24, 6, 1) != trainer.effective_batch_size(24):
        raise Incorrect("effective_batch_size(24, 6, 1) disagrees with gaviz's trainer")
    for bad in _BAD:
        try:
            global_batch_size(*bad)
        except ValueError:
            continue
        raise Incorrect(f"global_batch_size{bad} should raise ValueError: integers >= 1 only")
    return "hand-worked cases, gaviz's trainer, and bad input refused"


batch_sizes = Exercise(
    "10 batch sizes", _check_batch_sizes,
    hints=["Each replica takes its own micro-batch from every global batch the strategy splits.",
           "Refuse anything that is not an int >= 1; note that `True` is an int in Python."],
    solution_file="10_replicas.py")
