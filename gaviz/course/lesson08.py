"""Lesson 08's exercise: your accumulation trainer, one graph call per window.

The answer is a factory ``make_graph_trainer(model, optimizer, loss,
accumulation_steps) -> train_epoch``, where ``train_epoch(micro_batches)`` trains
one epoch and returns its number of updates. The check runs it under
:func:`gaviz.diagnose` (is it exact?), then counts what runs in Python: the
micro-batches taken from the dataset, and the optimizer's ``apply_gradients``
calls (traced once, they run in Python once; eager, once per update).
"""

from __future__ import annotations

import unittest.mock

import keras
import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops

import gaviz
from gaviz.course.exercise import Exercise, Incorrect, NotAttempted

_WINDOWS = 6  # in the counting run: 5 full windows and a partial one
_ACCUMULATION_STEPS = 4


def epoch_function(make_graph_trainer):
    """``make_graph_trainer`` as the function :func:`gaviz.diagnose` calls once per epoch:
    one trainer per model and optimizer, built on the first epoch, reused after."""
    trainers = {}

    def train_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
        key = (id(model), id(optimizer))
        if key not in trainers:
            trainers[key] = make_graph_trainer(model, optimizer, loss, accumulation_steps)
        return trainers[key](micro_batches)

    train_epoch.__name__ = getattr(make_graph_trainer, "__name__", "make_graph_trainer")
    return train_epoch


def _python_work(make_graph_trainer):
    """Runs two epochs of ``_WINDOWS`` windows; counts micro-batches taken in Python,
    apply_gradients calls made from Python, and the updates the epochs report."""
    x, y = gaviz.demo.make_data(32 * (_ACCUMULATION_STEPS * (_WINDOWS - 1) + 2), seed=0)
    micro_batches = gaviz.demo.make_dataset(x, y, 32)
    optimizer = keras.optimizers.SGD(0.01)
    train_epoch = make_graph_trainer(gaviz.demo.make_model(seed=0), optimizer,
                                     keras.losses.MeanSquaredError(), _ACCUMULATION_STEPS)
    if train_epoch is None:
        raise NotAttempted("make_graph_trainer still returns None")
    taken = []
    original_next = iterator_ops.OwnedIterator.__next__

    def counting_next(self):
        taken.append(1)
        return original_next(self)

    with unittest.mock.patch.object(iterator_ops.OwnedIterator, "__next__", counting_next), \
            unittest.mock.patch.object(type(optimizer), "apply_gradients", autospec=True,
                                       side_effect=type(optimizer).apply_gradients) as applied:
        updates = [train_epoch(micro_batches) for _ in range(2)]
    return len(taken), applied.call_count, updates


def _check_graph_trainer(make_graph_trainer) -> str:
    logger, level = tf.get_logger(), tf.get_logger().level
    logger.setLevel("ERROR")  # diagnose builds a trainer per probe: retracing warnings are expected
    try:
        return _judge(make_graph_trainer)
    finally:
        logger.setLevel(level)


def _judge(make_graph_trainer) -> str:
    micro_batches_in_python, applies_in_python, updates = _python_work(make_graph_trainer)
    if updates != [_WINDOWS, _WINDOWS]:
        raise Incorrect(f"each epoch of {_WINDOWS} windows (the last one partial) should report "
                        f"{_WINDOWS} updates; train_epoch returned {updates}")
    diagnosis = gaviz.diagnose(epoch_function(make_graph_trainer),
                               accumulation_steps=_ACCUMULATION_STEPS)
    if not diagnosis.exact:
        raise Incorrect("gaviz.diagnose finds: " + diagnosis.summary())
    if micro_batches_in_python:
        raise Incorrect(f"{micro_batches_in_python} micro-batches were taken from the dataset in "
                        "Python: pass the iterator into the tf.function and take each window's "
                        "micro-batches there, so that one graph call does a whole window")
    if applies_in_python > 2:
        raise Incorrect(f"apply_gradients ran in Python {applies_in_python} times for "
                        f"{2 * _WINDOWS} updates: the update is not inside the tf.function, or "
                        "the function is traced again for every window")
    return (f"exact by gaviz.diagnose, and {2 * _WINDOWS} updates in 2 epochs with no micro-batch "
            "taken in Python: one graph call per window")


graph_trainer = Exercise(
    "08 make_graph_trainer", _check_graph_trainer,
    hints=["Start from make_micro_step_trainer: the body of its Python loop (take a micro-batch, "
           "add its gradient) moves into a tf.function that takes the dataset's iterator.",
           "Inside that tf.function, `for _ in tf.range(accumulation_steps):` becomes a graph loop. "
           "Take each micro-batch with `iterator.get_next_as_optional()`; `break` when "
           "`has_value()` is false (the epoch's last window may be short).",
           "After the loop, apply and reset only `if sample_count > 0` (AutoGraph makes it a "
           "tf.cond), and return that condition: train_epoch calls the function until it is False."],
    solution_file="08_graph_trainer.py")
