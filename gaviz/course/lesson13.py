"""The capstone's exercise: lesson 08's loop on gaviz.Accumulator, its count in real tokens.

::

    from gaviz.course import lesson13
    lesson13.tokens.check(token_epoch)

The learner's ``token_epoch(model, optimizer, loss, micro_batches,
accumulation_steps)`` is lesson 08's ``accumulator_epoch`` with ``count`` the
micro-batch's real tokens: Keras's loss on the language model's output is a
mean over them (the embedding's mask reaches the loss). The checker trains it
one epoch on padded lines of real text and compares the weights with the
big-batch reference (:func:`gaviz.course.language_model.big_batch_reference`);
when they differ it names the fault by training each known wrong rule
(:data:`FAULTS`) and finding the one the learner's weights match.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from gaviz.course import corpus, language_model
from gaviz.course.exercise import Exercise, Incorrect, solution_code
from gaviz.course.graph import expected_retracing
from gaviz.course.loop import flat_weights
from gaviz.course.repairs import require_attempted

K = 3
#: A second k: an answer must read its accumulation_steps argument (the capstone's own K is 4).
OTHER_K = 2
MICRO_BATCH_SIZE = 4
LINES = 10 * MICRO_BATCH_SIZE  # windows of 3, 3, 3 micro-batches, then a partial one of 1
UPDATES = 4
#: Plain SGD, steps large enough that a wrong divisor shows in the weights, not scaled away
#: (over four updates the weights move up to 0.034), small enough that the summed loss's
#: updates, tokens times too large, stay finite.
LEARNING_RATE = 0.1
#: Right answers (the solution, an eager loop, count_nonzero) land 2.2e-8 from the big batch at
#: k = 3 and at k = 2 (measured); the nearest wrong one, a count a token short per micro-batch,
#: lands 7.6e-6 away (4.7e-5 at k = 2), a token short per line 1.1e-4. 1e-6 is between, nearer
#: the wrong side: right answers on other kernels round differently. (At the learning rate of
#: 0.01 it had, a token short per micro-batch landed 3.1e-7 away, right answers 3.0e-8.)
TOLERANCE = 1e-6


class Fault(NamedTuple):
    """A wrong window for ``step``, and what to tell a learner whose loop follows it.

    Each micro-batch's ``loss`` (``"token mean"``: its real-token losses over its real
    tokens, Keras's with the mask; ``"position mean"``: every position's loss over its
    positions, padding included; ``"token sum"``: its real-token losses summed) is weighed
    by its ``count`` (``"tokens"``, ``"positions"``, ``"lines"``, ``"one"`` or ``"pairs"``,
    the tokens less one per line) and the window
    divides by the counts' total, as ``gaviz.Accumulator`` does.
    """

    name: str
    loss: str
    count: str
    message: str


_COUNT = "Count what the mean divided by: the micro-batch's real tokens (padding is token 0)"
_FAULTS = [  # the likeliest first: lesson 08's loop, unchanged
    Fault("by micro-batch means", "token mean", "one",
          "count is the same for every micro-batch (its lines, as in lesson 08), but the loss "
          "is a mean over each micro-batch's real tokens: every micro-batch weighs the same, "
          "the mean of micro-batch means (Keras's built-in, and Hugging Face before its 2024 "
          "fix), so a token among short lines weighs more. " + _COUNT),
    Fault("counted by positions", "token mean", "positions",
          "count is the micro-batch's positions, padding included, but the loss is a mean over "
          "its real tokens: a micro-batch with much padding weighs more than its tokens. "
          "Count the real tokens, not the positions (padding is token 0)"),
    Fault("padding counted", "position mean", "positions",
          "the loss is a mean over every position, padding included (tf.reduce_mean of "
          "loss.call), and count its positions: the window divides by positions, and the "
          "padding's losses are in it. Take the loss as Keras computes it with the model's "
          "mask, `loss(y, model(x, training=True))`, a mean over real tokens, and count those"),
    Fault("padding in the mean", "position mean", "tokens",
          "count is the real tokens, right, but the loss is a mean over every position, "
          "padding included (tf.reduce_mean of loss.call): use Keras's loss on the model's "
          "output, `loss(y, model(x, training=True))`, which the mask limits to real tokens"),
    Fault("summed, counted", "token sum", "tokens",
          "step takes the gradient of the micro-batch's *mean* loss and weighs it by count; "
          "given the summed loss, each token counts as many times as its micro-batch has "
          "tokens. Differentiate `loss(y, model(x, training=True))`, the mean"),
    Fault("pairs counted", "token mean", "pairs",
          "count is a token short per line (a line of n tokens makes n - 1 next-token pairs?), "
          "but x and y already are the pairs, y one token ahead: every real token of x has its "
          "target, and the loss divided by all of them. " + _COUNT),
]
#: Each known wrong window, by name, in the order the checker tries them.
FAULTS = {fault.name: fault for fault in _FAULTS}


def _rule_value(loss, model, window_batches, fault: Fault):
    """The window's loss under ``fault``'s rule, from its micro-batches as the data cuts them:
    each micro-batch's loss weighed by its count, over the counts' total."""
    weighed, counts = [], []
    for inputs, targets in window_batches:
        per_token = loss.call(targets, model(inputs, training=True))
        real = tf.cast(inputs != corpus.PAD, tf.float32)
        tokens, positions = tf.reduce_sum(real), tf.cast(tf.size(real), tf.float32)
        value = {"token mean": tf.reduce_sum(per_token * real) / tokens,
                 "position mean": tf.reduce_mean(per_token),
                 "token sum": tf.reduce_sum(per_token * real)}[fault.loss]
        lines = tf.cast(tf.shape(inputs)[0], tf.float32)
        count = {"tokens": tokens, "positions": positions, "one": tf.constant(1.0),
                 "lines": lines, "pairs": tokens - lines}[fault.count]
        weighed.append(count * value)
        counts.append(count)
    return tf.add_n(weighed) / tf.add_n(counts)


def faulty_epoch(model, optimizer, loss, micro_batches, accumulation_steps, fault: Fault) -> None:
    """One epoch of windows trained by ``fault``'s rule (eager: it checks, it is not timed)."""
    batches = list(micro_batches)
    variables = model.trainable_variables
    for start in range(0, len(batches), accumulation_steps):
        with tf.GradientTape() as tape:
            value = _rule_value(loss, model, batches[start:start + accumulation_steps], fault)
        gradients = language_model.dense(tape.gradient(value, variables))
        optimizer.apply_gradients(zip(gradients, variables))


def lesson08_accumulator_epoch():
    """Lesson 08's second solution, ``accumulator_epoch``, as ``%load
    solutions/08_accumulator_epoch.py`` pastes it: the loop the capstone starts from, its
    count in rows."""
    namespace = {}
    exec(compile(solution_code("08_accumulator_epoch.py"), "solutions/08_accumulator_epoch.py",
                 "exec"), namespace)
    return namespace["accumulator_epoch"]


def _problem():
    lines = corpus.make_lines(corpus.source_lines()[:LINES], seed=1)
    return lines, corpus.micro_batches(lines, MICRO_BATCH_SIZE), language_model.token_loss()


def _fresh():
    return language_model.make_model(seed=1), keras.optimizers.SGD(LEARNING_RATE)


def _check_updates(updates, k) -> None:
    micro_batches = LINES // MICRO_BATCH_SIZE
    full, rest = divmod(micro_batches, k)
    said = f"{updates} updates for {micro_batches} micro-batches with accumulation_steps={k}"
    if rest and updates == full:
        raise Incorrect(f"{said}: the partial window (the last micro-batch) was never applied. "
                        "Call accumulator.flush() after the loop")
    if updates != full + bool(rest):
        raise Incorrect(f"{said}: expected {full + bool(rest)}, {full} full windows"
                        f"{' and the partial one' if rest else ''}. Give each micro-batch to "
                        "the Accumulator's step, then flush()")


def _trained(token_epoch, micro_batches, loss, k):
    """A fresh model trained one epoch by ``token_epoch`` at ``k``; (model, updates)."""
    model, optimizer = _fresh()
    with expected_retracing():  # a tf.function made per epoch traces per call
        token_epoch(model, optimizer, loss, micro_batches, k)
    return model, int(optimizer.iterations)


def _from_the_big_batch(model, k) -> float:
    """How far ``model`` ends from the big-batch reference at ``k``."""
    return float(np.max(np.abs(flat_weights(model) - _reference_weights(k))))


@functools.lru_cache(maxsize=None)
def _reference_weights(k):
    """The big-batch reference's weights after one epoch of the check's problem at ``k`` (the
    same every time: kept, as the faults' are)."""
    lines, _, loss = _problem()
    reference, reference_optimizer = _fresh()
    language_model.big_batch_reference(reference, reference_optimizer, loss, lines,
                                       k * MICRO_BATCH_SIZE)
    return flat_weights(reference)


def _check_token_epoch(token_epoch) -> str:
    require_attempted(token_epoch, "token_epoch does nothing yet")
    _, micro_batches, loss = _problem()
    model, updates = _trained(token_epoch, micro_batches, loss, K)
    other, other_updates = _trained(token_epoch, micro_batches, loss, OTHER_K)
    if updates == other_updates:
        raise Incorrect(f"{updates} updates for 10 micro-batches both with accumulation_steps="
                        f"{K} and {OTHER_K}: your loop ignores its accumulation_steps argument "
                        "(the notebook's K?). Make the Accumulator with the accumulation_steps "
                        "your function is given")
    _check_updates(updates, K)
    _check_updates(other_updates, OTHER_K)
    difference = _from_the_big_batch(model, K)
    other_difference = _from_the_big_batch(other, OTHER_K)
    if difference <= TOLERANCE and other_difference <= TOLERANCE:
        return (f"{UPDATES} updates (the last window partial) on {LINES} padded lines, and 5 "
                f"at k = {OTHER_K}: the weights of the big batch divided by its real tokens, to "
                f"{max(difference, other_difference):.0e}")
    if difference <= TOLERANCE:
        raise Incorrect(f"with accumulation_steps={K} the weights are the big batch's, but with "
                        f"{OTHER_K} they end {other_difference:.1e} from it: each window divides "
                        "by its own real tokens, whatever k is")
    fault, distance = _nearest_fault(model)
    if distance < 0.1 * difference:
        raise Incorrect(f"{fault.message}. On the check's {LINES} lines, one epoch of plain "
                        f"SGD, the weights end {difference:.1e} from the big batch's; an exact "
                        f"loop ends within float32 rounding ({TOLERANCE:.0e})")
    raise Incorrect(f"after one epoch the weights differ from the big batch's by "
                    f"{difference:.1e}, and match none of the usual faults: step each "
                    "micro-batch with the gradient of Keras's loss, a mean over its real "
                    "tokens, and count those real tokens")


def _nearest_fault(model):
    """The known wrong window whose weights the learner's are nearest, and how near."""
    mine = flat_weights(model)
    found = [(float(np.max(np.abs(mine - _fault_weights(name)))), fault)
             for name, fault in FAULTS.items()]
    distance, fault = min(found, key=lambda pair: pair[0])
    return fault, distance


@functools.lru_cache(maxsize=None)
def _fault_weights(name):
    """The weights one epoch of the check's problem gives under FAULTS[name] (the same every
    time: kept, so that a learner's second check, or a test's, trains none again)."""
    _, micro_batches, loss = _problem()
    wrong, wrong_optimizer = _fresh()
    faulty_epoch(wrong, wrong_optimizer, loss, micro_batches, K, FAULTS[name])
    return flat_weights(wrong)


tokens = Exercise(
    "the capstone's loop, counting real tokens",
    _check_token_epoch,
    hints=[
        "Start from lesson 08's accumulator_epoch: only `count` changes.",
        "Keras's loss on this model's output is a mean over the real tokens (the embedding's "
        "mask reaches it): count what it divided by. Padding is token 0, so "
        "`tf.cast(x != 0, tf.float32)` marks the real tokens.",
        "`count=tf.reduce_sum(tf.cast(x != 0, tf.float32))`; keep the flush after the loop.",
    ],
    solution_file="13_token_epoch.py",
)
