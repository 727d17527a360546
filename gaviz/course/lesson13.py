"""The capstone's exercise: lesson 08's graph window, normalized by real tokens.

::

    from gaviz.course import lesson13
    lesson13.tokens.check(make_token_window)

The learner's ``make_token_window(model, optimizer, loss, element_spec)``
returns a ``tf.function`` ``window(iterator, accumulation_steps)`` as in lesson
08, whose update divides the window's summed per-token losses, padding left
out, by the window's real-token count. The checker trains it one epoch on
padded lines of real text and compares the weights with the big-batch
reference (:func:`gaviz.course.language_model.big_batch_reference`); when they
differ it names the fault by training each known wrong rule (:data:`FAULTS`)
and finding the one the learner's weights match.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

from gaviz.course import corpus, language_model
from gaviz.course.exercise import Exercise, Incorrect, attempted, solution_code
from gaviz.course.graph import run_windows
from gaviz.course.loop import max_difference

K = 3
MICRO_BATCH_SIZE = 4
LINES = 10 * MICRO_BATCH_SIZE  # windows of 3, 3, 3 micro-batches, then a partial one of 1
LEARNING_RATE = 0.01  # plain SGD: a wrong divisor shows in the weights, not scaled away
TOLERANCE = 1e-5  # float32 rounding over four updates
#: A wrong rule (the sum undivided: steps hundreds of times too long) can send the weights far
#: away, where float32 rounding grows with them: faults are matched relative to the weights' size.
FAULT_TOLERANCE = 1e-4


class Fault(NamedTuple):
    """A wrong loss rule for a window, and what to tell a learner whose trainer follows it.

    ``divisor`` is one of ``"tokens"`` (the window's real tokens), ``"positions"``
    (its padded positions), ``"samples"`` (its lines), ``"micro-batch means"`` (each
    micro-batch divided by its own real tokens, then the mean over the window's
    micro-batches) or ``"nothing"``.
    """

    name: str
    masked: bool  # False: the padding's losses are in the sum
    divisor: str
    message: str


_MASK = "multiply the per-token losses by the mask (inputs != 0) before summing"
_FAULTS = [  # the likeliest first: lesson 08's window, unchanged
    Fault("padding counted, by samples", False, "samples",
          "normalized by samples, with the padding counted: lesson 08's window as it was, "
          "dividing every position's loss by the number of lines. Multiply the per-token "
          "losses by the mask (inputs != 0), and count real tokens instead of lines"),
    Fault("normalized by samples", True, "samples",
          "normalized by samples: the update divides the window's summed token losses by its "
          "number of lines, so it is as many times too large as a line has tokens on average. "
          "Count the real tokens instead (the sum of the mask) and divide by their window total"),
    Fault("by micro-batch means", True, "micro-batch means",
          "normalized by micro-batch means: each micro-batch is divided by its own token count "
          "and the window averages those means (Keras's built-in, and Hugging Face before its "
          "2024 fix), so a token in a micro-batch of short lines weighs more. Add the summed "
          "losses and the token counts over the window; divide once, in the update"),
    Fault("never divided", True, "nothing",
          "never divided: the update applies the window's summed token losses, undivided. "
          "Divide by the window's real-token count"),
    Fault("padding counted", False, "tokens",
          f"padding counted: the padded positions' losses are in the window's sum; {_MASK}"),
    Fault("padding counted, by positions", False, "positions",
          "padding counted: the window's sum holds the padded positions' losses and is divided "
          f"by every position, padding included; {_MASK}, and count the mask's ones"),
]
#: Each known wrong rule of a token window, by name, in the order the checker tries them.
FAULTS = {fault.name: fault for fault in _FAULTS}


def _rule_value(loss, model, window_batches, fault: Fault):
    """The window's loss under ``fault``'s rule, from its micro-batches as the data cuts them."""
    sums, counts = [], []
    for inputs, targets in window_batches:
        per_token = loss.call(targets, model(inputs, training=True))
        real = tf.cast(inputs != corpus.PAD, tf.float32)
        sums.append(tf.reduce_sum(per_token * real if fault.masked else per_token))
        counts.append({"tokens": tf.reduce_sum(real), "positions": tf.cast(tf.size(real), tf.float32),
                       "samples": tf.cast(tf.shape(inputs)[0], tf.float32)
                       }.get(fault.divisor, tf.reduce_sum(real)))
    if fault.divisor == "micro-batch means":
        return tf.add_n([s / c for s, c in zip(sums, counts)]) / len(sums)
    if fault.divisor == "nothing":
        return tf.add_n(sums)
    return tf.add_n(sums) / tf.add_n(counts)


def faulty_epoch(model, optimizer, loss, micro_batches, accumulation_steps, fault: Fault) -> None:
    """One epoch of windows trained by ``fault``'s rule (eager: it checks, it is not timed)."""
    batches = list(micro_batches)
    variables = model.trainable_variables
    for start in range(0, len(batches), accumulation_steps):
        with tf.GradientTape() as tape:
            value = _rule_value(loss, model, batches[start:start + accumulation_steps], fault)
        gradients = language_model.dense(tape.gradient(value, variables))
        optimizer.apply_gradients(zip(gradients, variables))


def lesson08_make_window():
    """Lesson 08's solution, ``make_window``, as ``%load solutions/08_graph_trainer.py`` pastes
    it: the window the capstone starts from, divided by samples, padding included."""
    namespace = {}
    exec(compile(solution_code("08_graph_trainer.py"), "solutions/08_graph_trainer.py", "exec"),
         namespace)
    return namespace["make_window"]


def _same_weights(model, other) -> bool:
    largest = max(float(tf.reduce_max(tf.abs(w))) for w in other.weights)
    return max_difference(model, other) <= FAULT_TOLERANCE * max(1.0, largest)


def _problem():
    lines = corpus.make_lines(corpus.source_lines()[:LINES], seed=1)
    return lines, corpus.micro_batches(lines, MICRO_BATCH_SIZE), language_model.token_loss()


def _fresh():
    return language_model.make_model(seed=1), keras.optimizers.SGD(LEARNING_RATE)


def _check_token_window(make_token_window) -> str:
    lines, micro_batches, loss = _problem()
    model, optimizer = _fresh()
    window = make_token_window(model, optimizer, loss, micro_batches.element_spec)
    attempted(window)
    calls = run_windows(window, micro_batches, K)
    reference, reference_optimizer = _fresh()
    language_model.big_batch_reference(reference, reference_optimizer, loss, lines,
                                       K * MICRO_BATCH_SIZE)
    difference = max_difference(model, reference)
    if difference <= TOLERANCE:
        return (f"{calls} windows (the last one partial) on {LINES} padded lines: the weights of "
                f"the big batch divided by its real tokens, to {difference:.0e}")
    for fault in FAULTS.values():
        wrong, wrong_optimizer = _fresh()
        faulty_epoch(wrong, wrong_optimizer, loss, micro_batches, K, fault)
        if _same_weights(model, wrong):
            raise Incorrect(f"{fault.message} (the weights differ from the big batch's by "
                            f"{difference:.1e})")
    raise Incorrect(f"after one epoch the weights differ from the big batch's by "
                    f"{difference:.1e}, and match none of the usual faults: divide the window's "
                    "summed real-token losses by its real-token count, once per update")


tokens = Exercise(
    "the capstone's window, normalized by real tokens",
    _check_token_window,
    hints=[
        "Start from lesson 08's make_window: only the micro-step changes, and what the "
        "count variable counts.",
        "Padding is token 0, so `real = tf.cast(x != 0, tf.float32)` marks the real tokens; "
        "the per-token losses `loss.call(y, model(x, training=True))` have the same shape.",
        "Sum `per_token * real`, and add `tf.reduce_sum(real)` to the count: the update then "
        "divides the window's sum by the window's real tokens, as the big batch does.",
    ],
    solution_file="13_token_window.py",
)
