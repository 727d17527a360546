"""Lesson 08's drivers: Python loops around the learner's graph code, and a fair clock.

The learner writes the graph: ``make_window(model, optimizer, loss,
element_spec)`` returns a ``tf.function`` ``window(iterator,
accumulation_steps)`` that reads up to k micro-batches from a ``tf.data``
iterator *inside the graph*, adds them into accumulator variables, applies one
update if it read any (so the partial window at the end of an epoch is
flushed), and returns how many it read. What stays in Python is here::

    window = make_window(model, optimizer, loss, micro_batches.element_spec)
    run_windows(window, micro_batches, 4)             # one epoch: one graph call per window
    gaviz.diagnose(windowed_epoch(make_window))       # what diagnose calls, per epoch
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time

import tensorflow as tf


def run_windows(window, micro_batches, accumulation_steps) -> int:
    """Trains one epoch, one ``window`` call per window; returns the number of calls.

    Reads one number per window back into Python (how many micro-batches the
    window took): a window that took fewer than k means the data ran out.
    """
    iterator, k = iter(micro_batches), tf.constant(accumulation_steps)
    most = int(micro_batches.cardinality()) // accumulation_steps + 1  # < 0: unknown
    calls = 1
    while int(window(iterator, k)) == accumulation_steps:
        calls += 1
        if 0 < most < calls:
            raise RuntimeError(f"`window` returned {accumulation_steps} (a full window) on call "
                               f"{calls}, past the end of the data: return how many "
                               "micro-batches it read, 0 once the data has run out")
    return calls


def windowed_epoch(make_window):
    """``train_epoch(model, optimizer, loss, micro_batches, accumulation_steps)`` for
    :func:`gaviz.diagnose`: builds the window for the model it is given (diagnose
    gives each probe a fresh one), then runs one epoch with :func:`run_windows`."""

    def train_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
        window = make_window(model, optimizer, loss, micro_batches.element_spec)
        run_windows(window, micro_batches, accumulation_steps)

    train_epoch.__name__ = getattr(make_window, "__name__", "make_window")
    # What diagnose's summary calls it: the learner's own function, not windowed_epoch's inner.
    train_epoch.__qualname__ = f"the windows of your {train_epoch.__name__}"
    return train_epoch


def median_seconds(run_epoch, repeats: int = 5) -> float:
    """The median wall time of ``repeats`` calls of ``run_epoch()``, after one untimed
    warm-up call (tracing and other first-call costs are not part of an epoch)."""
    run_epoch()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_epoch()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


@contextlib.contextmanager
def expected_retracing():
    """Keeps TensorFlow's "triggered tf.function retracing" warning off the screen.

    For code that traces new graphs on purpose: each of diagnose's probes
    brings a fresh model, so a function building its graphs per model traces
    once per probe, and TensorFlow, counting traces of functions from the same
    source together, warns (on stderr, in red in a notebook).
    """
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
