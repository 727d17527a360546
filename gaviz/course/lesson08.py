"""Lesson 08's exercises: one graph call per window, and a loop on ``gaviz.Accumulator``.

::

    from gaviz.course import lesson08
    lesson08.window.check(make_window)
    lesson08.accumulator.check(accumulator_epoch)

The learner's ``make_window(model, optimizer, loss, element_spec)`` returns a
``tf.function`` ``window(iterator, accumulation_steps)`` that reads up to k
micro-batches from the iterator inside the graph, applies one update if it
read any, and returns how many it read (see :mod:`gaviz.course.graph`).

The learner's ``accumulator_epoch(model, optimizer, loss, micro_batches,
accumulation_steps)`` trains one epoch on a ``gaviz.Accumulator``: each
micro-batch's mean loss, its gradient stepped with the micro-batch's rows as
``count``, and the partial window flushed at the end.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.graph import expected_retracing, windowed_epoch
from gaviz.course.loop import accumulation_epoch, flat_weights, max_difference
from gaviz.course.repairs import require_attempted
from gaviz.gallery.diagnosis import FIXES, diagnose

K = 4
MICRO_BATCH_SIZE = 8
#: 9 micro-batches, the last one ragged (3 rows): windows of 4, 4 and a tail of one micro-batch,
#: which a window that updates only when it read more than one would drop (diagnose's own
#: partial windows hold 2).
SAMPLES = 8 * MICRO_BATCH_SIZE + 3
MICRO_BATCHES = 9
EXPECTED_COUNTS = [4, 4, 1, 0]  # and then an empty call: the data has run out


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
    if difference > 1e-5:
        _check_tail(model, micro_batches, loss, optimizer)
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
        raise Incorrect(f"for {MICRO_BATCHES} micro-batches and accumulation_steps={K}, four calls "
                        f"returned {counts}, expected {EXPECTED_COUNTS} (two full windows, the partial "
                        "one, then nothing left)")
    return counts


def _check_tail(model, micro_batches, loss, optimizer) -> None:
    """Incorrect when the learner's weights are the exact loop's without the tail of one
    micro-batch: a window that read only one was never applied."""
    without, without_optimizer = _fresh()
    accumulation_epoch(without, without_optimizer, loss, micro_batches.take(2 * K), K)
    if max_difference(model, without) <= 1e-5 and int(optimizer.iterations) == 2:
        raise Incorrect(f"2 updates for {MICRO_BATCHES} micro-batches and accumulation_steps="
                        f"{K}: the last window read 1 micro-batch and was not applied. A tail "
                        "of one micro-batch is still a window: whatever a window read is applied")


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
    _refuse_unused(diagnosis)


def _refuse_unused(diagnosis) -> None:
    """Incorrect when the loop ignores part of the model's loss (its weight penalties)."""
    if diagnosis.unused:
        raise Incorrect(f"your loop ignores {', '.join(diagnosis.unused)}: diagnose's probe "
                        "model has an L2 weight penalty, and its gradient never reaches your "
                        "updates. A micro-step's loss is what a training step computes, the "
                        "model's penalties (model.losses) included")


window = Exercise(
    "08 one graph call per window",
    _check_window,
    hints=[
        "Start from count_window (step 4): keep its tf.range loop, its "
        "iterator.get_next_as_optional() and its count of what it read; drop the rows.",
        "Where count_window adds rows, add the micro-batch, decided in the graph: "
        "`tf.cond(batch.has_value(), lambda: steps.micro_step(*batch.get_value()), "
        "lambda: None)`.",
        "After the loop, update once if the window read anything: `tf.cond(read > 0, "
        "steps.update, lambda: None)`, then return read (run_windows stops when a window comes "
        "back short).",
        "The state (accumulators, sample count) lives in tf.Variables made once, outside the "
        "tf.function: make_graph_steps does that; call it in make_window, not in window.",
    ],
    solution_file="08_graph_trainer.py",
)


# ------------------------------------------------------------- a loop on gaviz.Accumulator

_COUNT = "`count` is what the micro-batch's mean loss divided by: this micro-batch's rows"


def _run(accumulator_epoch, micro_batches, loss):
    """A fresh model trained one epoch by ``accumulator_epoch``; (model, updates)."""
    model, optimizer = _fresh()
    with expected_retracing():  # a learner's tf.function made per epoch traces per call
        accumulator_epoch(model, optimizer, loss, micro_batches, K)
    return model, int(optimizer.iterations)


def _check_updates(updates) -> None:
    """Incorrect unless one epoch of the 9 micro-batches made 3 updates (4 + 4 + 1)."""
    if updates == 0:
        raise Incorrect("no update was applied: make a gaviz.Accumulator(optimizer, "
                        "model.trainable_variables, accumulation_steps) before the loop and call "
                        "its step(gradients, count) for every micro-batch")
    if updates == 2:
        raise Incorrect("2 updates for 9 micro-batches with accumulation_steps=4: the partial "
                        "window (the last micro-batch) was never applied. Call "
                        "accumulator.flush() after the loop")
    if updates == MICRO_BATCHES:
        raise Incorrect("9 updates, one per micro-batch: give the gradients to the "
                        "Accumulator's step (not to optimizer.apply_gradients), made with "
                        "accumulation_steps; it applies once the window holds that many")
    if updates == 1:
        raise Incorrect("1 update for 9 micro-batches with accumulation_steps=4: only the flush "
                        "at the end applied anything. `add` only adds a micro-batch, it never "
                        "applies (`step` adds, then applies once the window holds k), and an "
                        "Accumulator made anew for each micro-batch never holds k: make one "
                        "before the loop and give every micro-batch to its step")
    if updates != 3:
        raise Incorrect(f"{updates} updates for 9 micro-batches with accumulation_steps=4: "
                        "expected 3, two full windows and the partial one")


def _first_update_ratio(accumulator_epoch, micro_batches, loss) -> float:
    """The learner's first update (a full window of equal micro-batches) over the exact one's."""
    window = micro_batches.take(K)
    before = flat_weights(_fresh()[0])
    yours = flat_weights(_run(accumulator_epoch, window, loss)[0]) - before
    exact, optimizer = _fresh()
    accumulation_epoch(exact, optimizer, loss, window, K)
    return float(np.linalg.norm(yours) / np.linalg.norm(flat_weights(exact) - before))


def _check_accumulator(accumulator_epoch) -> str:
    require_attempted(accumulator_epoch, "accumulator_epoch does nothing yet")
    micro_batches, loss = _problem()
    model, updates = _run(accumulator_epoch, micro_batches, loss)
    _check_updates(updates)
    ratio = _first_update_ratio(accumulator_epoch, micro_batches, loss)
    if abs(ratio - MICRO_BATCH_SIZE) < 0.1:
        raise Incorrect(f"the first update is {ratio:.2f}x the exact one: as many times as a "
                        "micro-batch has rows. step takes the gradient of the micro-batch's "
                        "*mean* loss and weighs it by count itself; differentiate the mean "
                        "(what `loss(y, y_pred)` returns), not the sum")
    reference, optimizer = _fresh()
    accumulation_epoch(reference, optimizer, loss, micro_batches, K)
    difference = max_difference(model, reference)
    with expected_retracing():
        diagnosis = diagnose(accumulator_epoch, accumulation_steps=K)
    if "mean_of_means" in diagnosis.findings:
        raise Incorrect("micro-batches of different sizes weigh the same in the update, the mean "
                        f"of means of lesson 05 (diagnose: mean_of_means). {_COUNT}, not 1 or k")
    if difference > 1e-5 or not diagnosis.exact:
        raise Incorrect(f"after one epoch the weights differ from lesson 03's exact loop's by "
                        f"{difference:.1e}. gaviz.diagnose finds: {diagnosis.summary()}")
    _refuse_unused(diagnosis)
    return (f"3 updates for 9 micro-batches (the partial window of one flushed), the weights of lesson "
            f"03's exact loop (to {difference:.0e}), exact on all of diagnose's probes")


accumulator = Exercise(
    "08 a loop on gaviz.Accumulator",
    _check_accumulator,
    hints=[
        "Before the loop: `accumulator = gaviz.Accumulator(optimizer, "
        "model.trainable_variables, accumulation_steps)`. After it: `accumulator.flush()`.",
        "For each micro-batch, under a tf.GradientTape: `mean_loss = loss(y, model(x, "
        "training=True))`, then `accumulator.step(tape.gradient(mean_loss, "
        "model.trainable_variables), count=tf.shape(x)[0])`.",
        "Wrap the micro-step in @tf.function for one graph call per micro-step: step decides "
        "in the graph when to apply, so nothing retraces per window.",
    ],
    solution_file="08_accumulator_epoch.py",
)
