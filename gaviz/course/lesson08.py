"""Lesson 08's exercise: one graph call per window.

::

    from gaviz.course import lesson08
    lesson08.window.check(make_window)

The learner's ``make_window(model, optimizer, loss, element_spec)`` returns a
``tf.function`` ``window(iterator, accumulation_steps)`` that reads up to k
micro-batches from the iterator inside the graph, applies one update if it
read any, and returns how many it read (see :mod:`gaviz.course.graph`).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.graph import expected_retracing, windowed_epoch
from gaviz.course.loop import accumulation_epoch, max_difference
from gaviz.gallery.diagnosis import FIXES, diagnose

K = 4
MICRO_BATCH_SIZE = 8
SAMPLES = 9 * MICRO_BATCH_SIZE + 3  # 10 micro-batches, the last one ragged: windows of 4, 4, 2
EXPECTED_COUNTS = [4, 4, 2, 0]  # and then an empty call: the data has run out


def _problem():
    x, y = demo.make_data(SAMPLES, seed=1)
    micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO_BATCH_SIZE)
    return micro_batches, keras.losses.MeanSquaredError()


def _fresh():
    return demo.make_model(seed=1, hidden=16), keras.optimizers.SGD(0.1)


def _count(value, call) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Incorrect(f"window(iterator, accumulation_steps) returned {value!r} on call {call}: "
                        "return how many micro-batches it read (a tensor)") from None


def _check_window(make_window) -> str:
    """Runs ``make_window``'s window call by call, then against the eager loop and diagnose."""
    micro_batches, loss = _problem()
    model, optimizer = _fresh()
    window = make_window(model, optimizer, loss, micro_batches.element_spec)
    attempted(window)
    if not hasattr(window, "experimental_get_tracing_count"):
        raise Incorrect("`window` is a plain Python function, so every operation in it runs "
                        "eagerly: wrap it in tf.function, so that one call runs a whole window "
                        "as one graph")
    counts = _window_counts(window, iter(micro_batches))
    reference, reference_optimizer = _fresh()
    accumulation_epoch(reference, reference_optimizer, loss, micro_batches, K)
    difference = max_difference(model, reference)
    # Counted before diagnose, which calls make_window again.
    traces = window.experimental_get_tracing_count()
    _check_diagnosis(make_window, difference)
    return (f"one graph call per window ({counts} micro-batches per call), traced {traces} "
            f"time{'s' if traces > 1 else ''}, the weights of the exact eager loop (to "
            f"{difference:.0e}), exact on all of diagnose's probes")


def _window_counts(window, iterator) -> list:
    """What each of four calls of ``window`` read: one window each, then nothing."""
    counts = []
    try:
        for call in range(1, len(EXPECTED_COUNTS) + 1):
            counts.append(_count(window(iterator, tf.constant(K)), call))
    except ValueError as error:
        if "singleton tf.Variables" not in str(error):
            raise
        raise Incorrect("your window creates tf.Variables on every call (TensorFlow allows "
                        "them on the first trace only): create the accumulators and the sample "
                        "count once, in make_window, outside the tf.function, and only "
                        "assign to them inside") from None
    except tf.errors.OutOfRangeError:
        raise Incorrect(f"the iterator ran out inside your window (after calls returning "
                        f"{counts}): next(iterator) raises at the end of the data; read with "
                        "iterator.get_next_as_optional() and add the micro-batch only when "
                        "it has_value(), so the partial window is added and applied") from None
    if counts[0] == 1:
        raise Incorrect("one call read 1 micro-batch: loop over the window's micro-batches "
                        "inside the tf.function (for _ in tf.range(accumulation_steps)), so "
                        "that one call is one window")
    if counts != EXPECTED_COUNTS:
        raise Incorrect(f"for 10 micro-batches and accumulation_steps={K}, four calls returned "
                        f"{counts}, expected {EXPECTED_COUNTS} (two full windows, the partial "
                        "one, then nothing left)")
    return counts


def _check_diagnosis(make_window, difference):
    """Incorrect, with diagnose's findings, unless the weights match and every probe is exact."""
    if difference > 1e-5:
        with expected_retracing():
            findings = diagnose(windowed_epoch(make_window), accumulation_steps=K).findings
        named = "; ".join(f"{name}: {FIXES[name][0]} (lesson {FIXES[name][1][:2]})"
                          for name in findings)
        raise Incorrect(f"after one epoch the weights differ from your exact loop's by "
                        f"{difference:.1e}. diagnose finds {named or 'no named defect'}")
    with expected_retracing():
        diagnosis = diagnose(windowed_epoch(make_window), accumulation_steps=K)
    if not diagnosis.exact:
        raise Incorrect(f"diagnose finds: {diagnosis.summary()}")


window = Exercise(
    "08 one graph call per window",
    _check_window,
    hints=[
        "Build the state once, in make_window, outside the tf.function: the accumulators and "
        "the sample count as tf.Variables. make_graph_steps from above does exactly that: "
        "reuse its micro_step and update.",
        "Inside the tf.function, loop with `for _ in tf.range(accumulation_steps):` and read "
        "each micro-batch with `batch = iterator.get_next_as_optional()`: at the end of the "
        "data it comes back empty instead of raising.",
        "The graph must decide on every call, so decide with tf.cond on a tensor, not a Python "
        "if: `tf.cond(batch.has_value(), lambda: <add it>, lambda: None)`, and after the loop "
        "once more, to apply the update only if the window read anything.",
        "Count what you read, `consumed += tf.cast(batch.has_value(), tf.int32)` from "
        "`consumed = tf.constant(0)`, and return it: run_windows stops when a window comes "
        "back short.",
    ],
    solution_file="08_graph_trainer.py",
)
