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

import contextlib
import functools
import math

import keras
import numpy as np
import tensorflow as tf

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.graph import expected_retracing, windowed_epoch
from gaviz.course.loop import accumulation_epoch, flat_weights, max_difference
from gaviz.course.repairs import require_attempted
from gaviz.gallery.diagnosis import FIXES, diagnose
from gaviz.gallery.signatures import near
from gaviz.training import Accumulator

K = 4
#: A second k, other than the lesson's: an answer must read its accumulation_steps argument.
#: At 3 the 9 micro-batches make three full windows, the last ragged (8, 8 and 3 rows), where a
#: wrong count shows in the weights (at 4 the ragged micro-batch is a window alone).
OTHER_K = 3
MICRO_BATCH_SIZE = 8
#: 9 micro-batches, the last one ragged (3 rows): windows of 4, 4 and a tail of one micro-batch,
#: which a window that updates only when it read more than one would drop (diagnose's own
#: partial windows hold 2).
SAMPLES = 8 * MICRO_BATCH_SIZE + 3
MICRO_BATCHES = 9
#: What each call reads, by k: its windows, then an empty call (the data has run out).
EXPECTED_COUNTS = {K: [4, 4, 1, 0], OTHER_K: [3, 3, 3, 0]}
#: Right answers (the solutions, eager and in a tf.function, counts as ints or floats) land
#: within 6.0e-8 of lesson 03's exact loop at k = 4 and at k = 3 (measured); at k = 3 a count
#: one row off on the ragged micro-batch lands 1.0e-2 away, a tenth of a row 1.1e-3, and a
#: window dropped or a count never reset 0.2 or more. 1e-5 is between.
TOLERANCE = 1e-5


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
    """Runs ``make_window``'s window call by call, at the lesson's k and another, against the
    eager loop, then diagnose."""
    micro_batches, loss = _problem()
    model, optimizer = _fresh()
    window = make_window(model, optimizer, loss, micro_batches.element_spec)
    attempted(window)
    if not hasattr(window, "experimental_get_tracing_count"):
        raise Incorrect("`window` is a plain Python function, so every operation in it runs "
                        "eagerly: wrap it in tf.function, so that one call runs a whole window "
                        "as one graph")
    counts = _window_counts(window, iter(micro_batches), model, K)
    difference = _from_the_exact_loop(model, K)
    if not difference <= TOLERANCE:
        _check_tail(model, micro_batches, loss, optimizer)
        _check_count_reset(model, micro_batches, loss)
    # Counted before diagnose, which calls make_window again.
    traces = window.experimental_get_tracing_count()
    other, other_optimizer = _fresh()
    _window_counts(make_window(other, other_optimizer, loss, micro_batches.element_spec),
                   iter(micro_batches), other, OTHER_K)
    other_difference = _from_the_exact_loop(other, OTHER_K)
    _check_diagnosis(make_window, difference, other_difference)
    return (f"one graph call per window ({counts} micro-batches per call at k = {K}, "
            f"{EXPECTED_COUNTS[OTHER_K]} at k = {OTHER_K}), traced {traces} "
            f"time{'s' if traces > 1 else ''}, the weights of the exact eager loop (to "
            f"{max(difference, other_difference):.0e}), exact on all of diagnose's probes")


def _from_the_exact_loop(model, k) -> float:
    """How far ``model`` ends from lesson 03's exact loop, one epoch at ``k``."""
    return float(np.max(np.abs(flat_weights(model) - _exact_weights(k))))


@functools.lru_cache(maxsize=None)
def _exact_weights(k):
    """Lesson 03's exact loop's weights after one epoch of the check's problem at ``k`` (the
    same every time: kept)."""
    micro_batches, loss = _problem()
    reference, reference_optimizer = _fresh()
    accumulation_epoch(reference, reference_optimizer, loss, micro_batches, k)
    return flat_weights(reference)


def _window_counts(window, iterator, model, k) -> list:
    """What each call of ``window`` read at ``k``: one window each, then nothing; the weights
    finite after each."""
    counts, expected = [], EXPECTED_COUNTS[k]
    try:
        for call in range(1, len(expected) + 1):
            counts.append(_count(window(iterator, tf.constant(k)), call))
            if not np.all(np.isfinite(flat_weights(model))):
                _non_finite(call, counts[-1])
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
    if k != K and counts == EXPECTED_COUNTS[K]:
        raise Incorrect(f"with accumulation_steps={k}, four calls returned {counts}, expected "
                        f"{expected}: each call read {K} micro-batches, whatever "
                        "accumulation_steps said. Loop over the argument your window is given, "
                        "not the notebook's K: a trainer, or diagnose, asks for other k")
    if counts != expected:
        raise Incorrect(f"for {MICRO_BATCHES} micro-batches and accumulation_steps={k}, four "
                        f"calls returned {counts}, expected {expected} "
                        f"({_windows_said(k)}, then nothing left)")
    return counts


def _windows_said(k) -> str:
    full, rest = divmod(MICRO_BATCHES, k)
    return f"{full} full windows" + (", the partial one" if rest else "")


def _non_finite(call, read) -> None:
    """Incorrect: the weights are NaN or infinite after ``call``, which read ``read``."""
    if read == 0:
        raise Incorrect(f"the weights turned NaN on call {call}, which read nothing (the data "
                        "had run out): your window applied an update with nothing in it, its "
                        "sums over a sample count of 0, 0 / 0. Update only when the window read "
                        "something, decided in the graph after the loop")
    raise Incorrect(f"the weights turned NaN or infinite on call {call}, which read {read} "
                    "micro-batches: look at what the update divides by")


def _check_tail(model, micro_batches, loss, optimizer) -> None:
    """Incorrect when the learner's weights are the exact loop's without the tail of one
    micro-batch: a window that read only one was never applied."""
    without, without_optimizer = _fresh()
    accumulation_epoch(without, without_optimizer, loss, micro_batches.take(2 * K), K)
    if max_difference(model, without) <= TOLERANCE and int(optimizer.iterations) == 2:
        raise Incorrect(f"2 updates for {MICRO_BATCHES} micro-batches and accumulation_steps="
                        f"{K}: the last window read 1 micro-batch and was not applied. A tail "
                        "of one micro-batch is still a window: whatever a window read is applied")


def _check_count_reset(model, micro_batches, loss) -> None:
    """Incorrect when the learner's weights are the exact loop's with a sample count that is
    never reset (each update divided by every sample read so far)."""
    seen = [0.0]

    def over_everything_so_far(accumulators, sample_count):
        seen[0] += float(sample_count)
        return [accumulator / seen[0] for accumulator in accumulators]

    wrong, wrong_optimizer = _fresh()
    accumulation_epoch(wrong, wrong_optimizer, loss, micro_batches, K,
                       finish_window=over_everything_so_far)
    if max_difference(model, wrong) <= TOLERANCE:
        raise Incorrect("the sample count is never reset: each update divides its window's sums "
                        "by every sample read so far (32, then 64, then 67), not by its own "
                        "window's (32, 32, 3). Your accumulators are zeroed after each update; "
                        "zero the count with them")


def _check_diagnosis(make_window, difference, other_difference):
    """Incorrect, with diagnose's findings, unless the weights match and every probe is exact."""
    if not difference <= TOLERANCE or not other_difference <= TOLERANCE:
        k, gap = (K, difference) if not difference <= TOLERANCE else (OTHER_K, other_difference)
        with expected_retracing():
            findings = diagnose(windowed_epoch(make_window), accumulation_steps=K).findings
        named = "; ".join(f"{name}: {FIXES[name][0]} (lesson {FIXES[name][1][:2]})"
                          for name in findings)
        raise Incorrect(f"after one epoch at accumulation_steps={k} the weights differ from "
                        f"your exact loop's by {gap:.1e}. diagnose finds "
                        f"{named or 'no named defect'}")
    with expected_retracing():
        diagnosis = diagnose(windowed_epoch(make_window), accumulation_steps=K)
    _refuse_penalty(diagnosis, "the update adds the penalty's gradient once "
                    "(penalty_gradients), and no micro-step adds it")  # lesson 08's own way
    if not diagnosis.exact:
        raise Incorrect(f"on the check's micro-batches your windows give the exact loop's "
                        f"weights, but diagnose finds: {diagnosis.summary()}")
    _refuse_unused(diagnosis)


def _refuse_unused(diagnosis) -> None:
    """Incorrect when the loop ignores part of the model's loss (its weight penalties)."""
    if diagnosis.unused:
        raise Incorrect(f"your loop ignores {', '.join(diagnosis.unused)}: diagnose's probe "
                        "model has an L2 weight penalty, and its gradient never reaches your "
                        "updates. A micro-step's loss is what a training step computes, the "
                        "model's penalties (model.losses) included")


def _penalty_count(diagnosis):
    """How many times diagnose's penalized probe saw the weight penalty count per update (1 is
    exact, 0 ignored), or None when no probe measured it."""
    for verdict in diagnosis.probes:
        values = [value for value, label in zip(verdict.contributions, verdict.labels)
                  if label == "L2"]
        if values:
            return float(np.mean(values))
    return None


def _refuse_penalty(diagnosis, exact_way) -> None:
    """Incorrect when the weight penalty counts other than once per update (ignoring it is
    :func:`_refuse_unused`'s)."""
    count = _penalty_count(diagnosis)
    if count is None or near(count, 1) or near(count, 0):
        return
    k = diagnosis.accumulation_steps
    why = ("1/k: do not divide it by k; " if near(count, 1 / k) else
           "k: it is added once per micro-batch; " if near(count, k) else "")
    raise Incorrect(f"diagnose's probe model has an L2 weight penalty, and it counts "
                    f"{count:.2f} times per update (exact: once, as in Model.fit), {why}"
                    f"{exact_way}")


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
_ACCUMULATOR_PENALTY = ("step weighs each micro-batch's loss, the penalty in it, by its count, "
                        "and the window divides by all the counts, so a penalty added whole to "
                        "every micro-batch's mean loss comes out once")


@contextlib.contextmanager
def _counting_flushes():
    """Counts calls of ``gaviz.Accumulator.flush`` while the learner's epoch runs (a flush per
    micro-batch updates as often as apply_gradients per micro-batch does)."""
    calls, original = [], Accumulator.flush

    @functools.wraps(original)
    def flush(self, *arguments, **keywords):
        calls.append(1)
        return original(self, *arguments, **keywords)

    Accumulator.flush = flush
    try:
        yield calls
    finally:
        Accumulator.flush = original


def _run(accumulator_epoch, micro_batches, loss, k=K):
    """A fresh model trained one epoch by ``accumulator_epoch`` at ``k``; (model, updates,
    flush calls)."""
    model, optimizer = _fresh()
    with expected_retracing(), _counting_flushes() as flushes:  # a learner's tf.function made
        accumulator_epoch(model, optimizer, loss, micro_batches, k)  # per epoch traces per call
    return model, int(optimizer.iterations), len(flushes)


def _check_updates(updates, flushes, k=K) -> None:
    """Incorrect unless one epoch of the 9 micro-batches made its windows' updates at ``k``
    (4 + 4 + 1 at k = 4)."""
    full, rest = divmod(MICRO_BATCHES, k)
    said = (f"{updates} update{'s' * (updates != 1)} for {MICRO_BATCHES} micro-batches with "
            f"accumulation_steps={k}")
    if updates == 0:
        raise Incorrect("no update was applied: make a gaviz.Accumulator(optimizer, "
                        "model.trainable_variables, accumulation_steps) before the loop and call "
                        "its step(gradients, count) for every micro-batch")
    if updates == full and rest:
        raise Incorrect(f"{said}: the partial window (the last micro-batch) was never applied. "
                        "Call accumulator.flush() after the loop")
    if updates == MICRO_BATCHES and flushes > 1:
        raise Incorrect(f"{updates} updates, one per micro-batch: flush() was called {flushes} "
                        "times, after each micro-batch, and flush applies whatever the window "
                        "holds, one micro-batch here. Call it once, after the loop, for the "
                        "partial window: step applies the full ones")
    if updates == MICRO_BATCHES:
        raise Incorrect(f"{updates} updates, one per micro-batch: give the gradients to the "
                        "Accumulator's step (not to optimizer.apply_gradients), made with "
                        "accumulation_steps; it applies once the window holds that many")
    if updates == 1:
        raise Incorrect(f"{said}: only the flush at the end applied anything. `add` only adds a "
                        "micro-batch, it never applies (`step` adds, then applies once the "
                        "window holds k), and an Accumulator made anew for each micro-batch "
                        "never holds k: make one before the loop and give every micro-batch to "
                        "its step")
    if updates != full + bool(rest):
        raise Incorrect(f"{said}: expected {full + bool(rest)}, {full} full windows"
                        f"{' and the partial one' if rest else ''}")


def _first_update_ratio(accumulator_epoch, micro_batches, loss) -> float:
    """The learner's first update (a full window of equal micro-batches) over the exact one's."""
    window = micro_batches.take(K)
    before = flat_weights(_fresh()[0])
    yours = flat_weights(_run(accumulator_epoch, window, loss)[0]) - before
    exact, optimizer = _fresh()
    accumulation_epoch(exact, optimizer, loss, window, K)
    return float(np.linalg.norm(yours) / np.linalg.norm(flat_weights(exact) - before))


def _check_other_k(accumulator_epoch, micro_batches, loss) -> float:
    """Incorrect unless an epoch at OTHER_K is the exact loop's at OTHER_K; its difference."""
    model, updates, flushes = _run(accumulator_epoch, micro_batches, loss, OTHER_K)
    if not _from_the_exact_loop(model, K) > TOLERANCE:
        raise Incorrect(f"with accumulation_steps={OTHER_K} your epoch trains windows of {K} "
                        "micro-batches, the exact loop's at k = 4: make the Accumulator with the "
                        "accumulation_steps your function is given, not the notebook's K")
    _check_updates(updates, flushes, OTHER_K)
    return _from_the_exact_loop(model, OTHER_K)


def _check_accumulator(accumulator_epoch) -> str:
    require_attempted(accumulator_epoch, "accumulator_epoch does nothing yet")
    micro_batches, loss = _problem()
    model, updates, flushes = _run(accumulator_epoch, micro_batches, loss)
    _check_updates(updates, flushes)
    ratio = _first_update_ratio(accumulator_epoch, micro_batches, loss)
    if abs(ratio - MICRO_BATCH_SIZE) < 0.1:
        raise Incorrect(f"the first update is {ratio:.2f}x the exact one: as many times as a "
                        "micro-batch has rows. step takes the gradient of the micro-batch's "
                        "*mean* loss and weighs it by count itself; differentiate the mean "
                        "(what `loss(y, y_pred)` returns), not the sum")
    difference = _from_the_exact_loop(model, K)
    other_difference = _check_other_k(accumulator_epoch, micro_batches, loss)
    with expected_retracing():
        diagnosis = diagnose(accumulator_epoch, accumulation_steps=K)
    if "mean_of_means" in diagnosis.findings:
        raise Incorrect("micro-batches of different sizes weigh the same in the update, the mean "
                        f"of means of lesson 05 (diagnose: mean_of_means). {_COUNT}, not 1 or k")
    for k, gap in ((K, difference), (OTHER_K, other_difference)):
        if not gap <= TOLERANCE:
            raise Incorrect(f"after one epoch at accumulation_steps={k} the weights differ from "
                            f"lesson 03's exact loop's by {gap:.1e}. gaviz.diagnose finds: "
                            f"{diagnosis.summary()}")
    _refuse_penalty(diagnosis, _ACCUMULATOR_PENALTY)
    if not diagnosis.exact:
        raise Incorrect("on the check's micro-batches your loop gives the exact loop's weights, "
                        f"but gaviz.diagnose finds: {diagnosis.summary()}")
    _refuse_unused(diagnosis)
    return (f"3 updates for 9 micro-batches at k = {K} (the partial window of one flushed), "
            f"{math.ceil(MICRO_BATCHES / OTHER_K)} at k = {OTHER_K}, the weights of lesson 03's "
            f"exact loop (to {max(difference, other_difference):.0e}), exact on all of "
            "diagnose's probes")


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
