"""The learner's eager accumulation loop (lesson 03), written once, its pieces as arguments.

Lessons 04-06 each swap one piece for a broken one, measure the damage, and
have the learner write the repair::

    accumulation_epoch(model, optimizer, loss, micro_batches, 4)              # exact
    accumulation_epoch(..., reset=keep_accumulators)                          # PITFALL, lesson 04
    accumulation_epoch(..., micro_loss=mean_loss, finish_window=undivided)    # PITFALL, lesson 05
    accumulation_epoch(..., end_of_epoch=drop_partial_window)                 # PITFALL, lesson 06

Its first five arguments are those :func:`gaviz.diagnose` passes, so
``gaviz.diagnose(functools.partial(accumulation_epoch, reset=your_reset))``
names what is still wrong. The default pieces are exact: the same weights as
``Model.fit`` on the big batch, the partial window and a weight penalty
included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from gaviz.gallery.measure import flat_weights


@dataclass
class Window:
    """The loop's state between micro-batches: the sums, and how much they hold."""

    accumulators: list  # one tf.Variable per trainable variable: the summed gradients
    sample_count: float = 0.0  # what the window's sums will be divided by
    micro_steps: int = 0  # micro-batches added since the last update


def make_accumulators(variables) -> list:
    """One zero ``tf.Variable`` per trainable variable, same shape; not trainable."""
    return [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]


# ------------------------------------------------------------- exact pieces


def summed_loss(loss, y, y_pred, sample_weight=None):
    """Exact: differentiate the micro-batch's *summed* loss; it adds its sample count.

    With ``sample_weight`` (a padding mask, say) the weighted sum, and the
    weights' sum as the count: the window divides by its real tokens, as the
    trainer's ``normalize="weights"`` does.
    """
    per_sample = loss.call(y, y_pred) if hasattr(loss, "call") else loss(y, y_pred)
    if sample_weight is None:
        return tf.reduce_sum(per_sample), float(tf.shape(per_sample)[0])
    weights = tf.cast(sample_weight, per_sample.dtype)
    return tf.reduce_sum(per_sample * weights), float(tf.reduce_sum(weights))


def divide_by_count(accumulators, sample_count) -> list:
    """Exact: the window's gradient is its summed gradient over its sample count."""
    return [accumulator / sample_count for accumulator in accumulators]


def zero_accumulators(accumulators) -> None:
    """Exact: after an update the next window starts from zero."""
    for accumulator in accumulators:
        accumulator.assign(tf.zeros_like(accumulator))


def apply_partial_window(window: Window, update) -> None:
    """Exact: a window still holding micro-batches at the end of the epoch is applied."""
    if window.micro_steps:
        update()


# ------------------------------------------------------------- the loop


def accumulation_epoch(model, optimizer, loss, micro_batches, accumulation_steps, *,
                       micro_loss=summed_loss, finish_window=divide_by_count,
                       reset=zero_accumulators, end_of_epoch=apply_partial_window,
                       after_update=None) -> int:
    """Trains one epoch of accumulation, eagerly; returns the number of updates.

    One update per ``accumulation_steps`` micro-batches:
    ``w <- optimizer(finish_window(sum of gradients, sample count) + penalty gradient)``.

    Args:
        model, optimizer, loss: a Keras model, the optimizer it steps, a Keras loss.
        micro_batches: an iterable of ``(x, y)`` or ``(x, y, sample_weight)``
            micro-batches; the sample weights go to ``micro_loss``.
        accumulation_steps: micro-batches per update (k).
        micro_loss: ``(loss, y, y_pred[, sample_weight]) -> (objective, count)``:
            the scalar whose gradient a micro-batch adds, and what it adds to
            the window's count (``sample_weight`` passed only when the
            micro-batch has one).
        finish_window: ``(accumulators, sample_count) -> gradients``.
        reset: ``reset(accumulators)``, called after every update.
        end_of_epoch: ``end_of_epoch(window, update)``, called once after the
            last micro-batch; ``update()`` applies what the window holds.
        after_update: called with no arguments after every update (to record).
    """
    variables = model.trainable_variables
    window = Window(make_accumulators(variables))
    updates = 0

    def update():
        nonlocal updates
        gradients = finish_window(window.accumulators, window.sample_count)
        penalty = penalty_gradients(model)  # the weight penalty counts once per update
        optimizer.apply_gradients(zip([g + p for g, p in zip(gradients, penalty)], variables))
        reset(window.accumulators)
        window.sample_count, window.micro_steps = 0.0, 0
        updates += 1
        if after_update is not None:
            after_update()

    update.__qualname__ = "update"  # what a learner's error calls it, not ...<locals>.update

    for batch in micro_batches:
        x, y, *sample_weight = batch
        with tf.GradientTape() as tape:
            objective, count = micro_loss(loss, y, model(x, training=True), *sample_weight)
        for accumulator, gradient in zip(window.accumulators, tape.gradient(objective, variables)):
            accumulator.assign_add(gradient)
        window.sample_count += float(count)  # a Python number, a NumPy one or a tensor
        window.micro_steps += 1
        if window.micro_steps == accumulation_steps:
            update()
    end_of_epoch(window, update)
    return updates


def penalty_gradients(model) -> list:
    """Gradients of ``model.losses`` (weight penalties); zeros when there are none."""
    variables = model.trainable_variables
    if not model.losses:
        return [tf.zeros_like(v) for v in variables]
    with tf.GradientTape() as tape:
        penalty = tf.add_n(model.losses)
    gradients = tape.gradient(penalty, variables)
    return [tf.zeros_like(v) if g is None else g for g, v in zip(gradients, variables)]


# ------------------------------------------------------------- small shared helpers


def max_difference(model_a, model_b) -> float:
    """The largest absolute difference between two models' weights."""
    return float(np.max(np.abs(flat_weights(model_a) - flat_weights(model_b))))


def update_sizes(model, run) -> list:
    """Runs ``run(after_update)`` and returns the size ``|w_after - w_before|`` of each update."""
    sizes, before = [], [flat_weights(model)]

    def record():
        now = flat_weights(model)
        sizes.append(float(np.linalg.norm(now - before[0])))
        before[0] = now

    run(record)
    return sizes
