"""The pitfall gallery: the exact trainer with one classic mistake each.

Every class here is :class:`gaviz.AccumulationTrainer` with one labelled
change (search for ``# PITFALL:``), the same constructor and the same
``fit``. Where the mistake is arithmetic, the change is a different
:class:`~gaviz.rules.Rule`; where it is about state, it is one of the
trainer's documented hooks. They exist to be watched going wrong: measure
one against the exact trainer with :func:`gaviz.compare_with_exact`, or name
it with :func:`gaviz.diagnose`. They are teaching tools for one device:
constructed with a multi-replica strategy, each raises ``ValueError``.

``PITFALLS`` maps each pitfall's name to its class.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz import window
from gaviz.rules import Rule
from gaviz.trainer import AccumulationTrainer
from gaviz.window import WindowSums


def mean_contribution(micro: WindowSums) -> WindowSums:
    """A micro-batch's mean loss and gradient, counted as one unit of the window."""
    n = micro.normalizer
    return micro._replace(
        gradients=[tf.math.divide_no_nan(g, tf.cast(n, g.dtype)) for g in micro.gradients],
        loss_sum=tf.math.divide_no_nan(micro.loss_sum, n),
        normalizer=tf.ones_like(n),
    )


def no_divisor(normalizer, micro_steps, accumulation_steps):
    """Divides by one: the window's sum is used as it is."""
    del micro_steps, accumulation_steps
    return tf.ones_like(normalizer)


def full_window_divisor(normalizer, micro_steps, accumulation_steps):
    """The count a full window of micro-batches this size would have."""
    full = tf.cast(accumulation_steps, normalizer.dtype)
    return normalizer * full / tf.cast(tf.maximum(micro_steps, 1), normalizer.dtype)


def once_per_micro_step(micro_steps):
    return tf.cast(micro_steps, tf.float32)


class _Pitfall(AccumulationTrainer):
    """Common to the gallery: one device only."""

    single_replica_only = True


class MissingReset(_Pitfall):
    """Accumulators are never zeroed after an update.

    Symptom: updates grow with every window; the loss falls, then diverges.
    Cause: window t applies the sum of the gradients of windows 1..t.
    Fix: zero the accumulators after each update.
    Detect: the norm of successive updates grows with the update count, even
    at a tiny learning rate
    (``tests/test_pitfalls.py::test_missing_reset_updates_grow_with_the_update_count``).
    """

    window_sums_outlive_updates = True  # the gradients survive from window to window

    def next_window(self, sums):
        fresh = super().next_window(sums)
        # PITFALL: the gradient accumulators are never zeroed (only the counts are).
        return fresh._replace(gradients=sums.gradients)


class MissingNormalization(_Pitfall):
    """Micro-batch mean losses are summed, never divided by ``accumulation_steps``.

    Symptom: training as if the learning rate were ``accumulation_steps``
    times larger (it diverges where the same learning rate did not).
    Cause: each micro-batch's loss is its own mean; adding k of them without
    dividing gives k times the big batch's gradient.
    Fix: divide the window's summed loss by its sample count.
    Detect: with SGD the first update is exactly ``accumulation_steps`` times
    the exact one.
    """

    # PITFALL: micro-batch means are summed, and the sum is never divided.
    rule = Rule(contribution=mean_contribution, divisor=no_divisor)


class DroppedTail(_Pitfall):
    """The partial window at the end of each epoch is silently discarded.

    Symptom: the micro-batches after the last full window (``ceil(N / b) mod
    k`` of them) never reach the weights; with unshuffled data the same
    samples are lost every epoch.
    Cause: the update fires only when the micro-step counter reaches k, and
    the epoch ends first.
    Fix: apply the partial window at the end of the epoch, normalized by its
    own sample count (``tail="flush"``), or say you drop it (``tail="drop"``).
    Detect: change the tail samples: the weights do not change.
    """

    def __init__(self, model, optimizer, loss, accumulation_steps, tail="drop", **kwargs):
        if tail != "drop":
            raise ValueError(
                f"`tail` must be \"drop\" for DroppedTail: dropping the tail is its "
                f"mistake. Received: tail={tail!r}"
            )
        # PITFALL: whatever the epoch's end holds, the partial window is thrown away.
        super().__init__(model, optimizer, loss, accumulation_steps, tail="drop", **kwargs)


class UpdateEveryMicroStep(_Pitfall):
    """Gradients are applied on every micro-batch as well as at the window's end.

    Symptom: ``optimizer.iterations`` grows k+1 times per window; training
    behaves like a small batch with an extra, larger step.
    Cause: an ``apply_gradients`` left inside the micro-batch loop (one of the
    articles this project grew from does exactly this).
    Fix: apply only once per window.
    Detect: ``optimizer.iterations == (k + 1) * windows``; with SGD the first
    window moves the weights about k+1 times as far as the exact one.
    """

    def on_micro_batch(self, micro):
        # PITFALL: the micro-batch's own mean gradient is applied at once, too.
        self.window_loop.window_update.apply(window.finish(micro.gradients, micro.normalizer))
        return micro


class ZeroedWeights(_Pitfall):
    """The "reset" zeroes the model's variables instead of the accumulators.

    Symptom: the loss jumps back to that of an all-zero model after every
    update; nothing is learned.
    Cause: ``for var in model.trainable_variables: var.assign(zeros)`` where
    the accumulators were meant.
    Fix: zero the accumulators.
    Detect: every weight is exactly zero after an update.
    """

    def next_window(self, sums):
        # PITFALL: the reset zeroes the model's weights.
        for variable in self.model.trainable_variables:
            variable.assign(tf.zeros(variable.shape, dtype=variable.dtype))
        return super().next_window(sums)


class MeanOfMeans(_Pitfall):
    """Each micro-batch is normalized by its own size, then the means are averaged.

    Symptom: nothing visible with equal micro-batches; with ragged ones (a
    short last micro-batch, variable-length sequences) small micro-batches
    weigh as much as big ones, so some samples count more than others.
    Cause: the mean of means is not the mean. This is how Keras's built-in
    ``gradient_accumulation_steps`` works, and the bug Hugging Face fixed in
    2024 for token-level losses.
    Fix: sum the window's losses, divide once by its sample (or token) count.
    Detect: equal to the exact trainer for equal micro-batches, different for
    ragged ones.
    """

    # PITFALL: each micro-batch's mean counts as one unit; the window averages them.
    rule = Rule(contribution=mean_contribution)


class PerMicroBatchClipping(_Pitfall):
    """Each micro-batch's gradient is clipped instead of the accumulated one.

    Needs an optimizer with ``global_clipnorm``, ``clipnorm`` or ``clipvalue``.

    Symptom: updates smaller than the clip allows, and a direction that
    differs from the big batch's whenever a micro-batch gradient is clipped.
    Cause: clipping before accumulation (as one does without accumulation).
    Fix: clip once, the window's gradient (Keras optimizers do this when the
    trainer passes them the accumulated gradient).
    Detect: the update equals the average of individually clipped micro-batch
    gradients, whose norm is below the clip norm.
    """

    # PITFALL: the micro-batch's mean gradient is clipped before accumulation.
    rule = Rule(clip_micro_batches=True)

    def __init__(self, model, optimizer, *args, **kwargs):
        clips = ("global_clipnorm", "clipnorm", "clipvalue")
        if not any(getattr(optimizer, name, None) for name in clips):
            raise ValueError(
                "`optimizer` must clip (global_clipnorm, clipnorm or clipvalue) for "
                "PerMicroBatchClipping to show anything. Received an optimizer without "
                "clipping."
            )
        super().__init__(model, optimizer, *args, **kwargs)


class RegularizerEveryMicroStep(_Pitfall):
    """``model.losses`` is added to every micro-batch's loss: k times per update.

    Symptom: weight decay ``accumulation_steps`` times stronger than asked;
    weights shrink as accumulation grows.
    Cause: the regularization penalty is part of each micro-batch's loss, but
    only the data loss is normalized over the window.
    Fix: add the penalty once per update.
    Detect: with SGD the first update differs from the exact one by exactly
    ``(k - 1) * lr * grad(penalty)`` at the initial weights.
    """

    # PITFALL: one penalty per micro-step in the window, not one per update.
    rule = Rule(penalty_times=once_per_micro_step)


class UnderScaledTail(_Pitfall):
    """A partial window is divided as if it were full: its update is too small.

    Symptom: the update of the partial window at the end of an epoch is
    ``m / k`` of what it should be (``m`` micro-batches of ``k``); nothing
    else changes.
    Cause: dividing every window by ``accumulation_steps`` (``loss / k`` on
    each micro-batch's mean), whatever its length: what Hugging Face
    Accelerate and PyTorch Lightning do with the last window of an epoch.
    Fix: divide the window by what it holds (its own sample count).
    Detect: with SGD, equal to the exact trainer on full windows; the tail's
    update is exactly ``m / k`` times the exact one.
    """

    # PITFALL: the divisor of a full window, whatever this one holds.
    rule = Rule(divisor=full_window_divisor)


class CarriedTail(_Pitfall):
    """The partial window at the end of an epoch is continued into the next one.

    Symptom: an epoch's last micro-batches are applied together with the next
    epoch's first ones; windows straddle epochs, so "one update per window of
    this epoch" no longer holds, and a run's last partial window is never
    applied at all.
    Cause: a micro-step counter that is never reset at the end of an epoch:
    what Keras's built-in ``gradient_accumulation_steps`` does.
    Fix: flush the partial window at the end of the epoch (``tail="flush"``).
    Detect: over two epochs the updates differ from the exact trainer's from
    the first window that straddles the epoch boundary.
    """

    def __init__(self, model, optimizer, loss, accumulation_steps, tail="carry", **kwargs):
        if tail != "carry":
            raise ValueError(
                f"`tail` must be \"carry\" for CarriedTail: carrying the tail is its "
                f"mistake. Received: tail={tail!r}"
            )
        # PITFALL: the partial window waits for the next epoch.
        super().__init__(model, optimizer, loss, accumulation_steps, tail="carry", **kwargs)


PITFALLS = {
    "missing_reset": MissingReset,
    "missing_normalization": MissingNormalization,
    "dropped_tail": DroppedTail,
    "update_every_micro_step": UpdateEveryMicroStep,
    "zeroed_weights": ZeroedWeights,
    "mean_of_means": MeanOfMeans,
    "per_micro_batch_clipping": PerMicroBatchClipping,
    "regularizer_every_micro_step": RegularizerEveryMicroStep,
    "under_scaled_tail": UnderScaledTail,
    "carried_tail": CarriedTail,
}
