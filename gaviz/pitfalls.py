"""The pitfall gallery: the exact trainer with one classic mistake each.

They are teaching tools for one device: under ``tf.distribute`` use the
exact trainer.

Every class here is :class:`gaviz.AccumulationTrainer` with one labelled
change (search for ``# PITFALL:``), the same constructor and the same
``fit``. They exist to be watched going wrong: measure one against the exact
trainer with :func:`gaviz.compare_with_exact`.

``PITFALLS`` maps each pitfall's name to its class.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz.trainer import AccumulationTrainer


class MissingReset(AccumulationTrainer):
    """Accumulators are never zeroed after an update.

    Symptom: updates grow with every window; the loss falls, then diverges.
    Cause: window t applies the sum of the gradients of windows 1..t.
    Fix: zero the accumulators after each update (``_reset``).
    Detect: the norm of successive updates grows with the update count, even
    at a tiny learning rate
    (``tests/test_pitfalls.py::test_missing_reset_updates_grow_with_the_update_count``).
    """

    _keep_accumulators = True  # the sums must survive from window to window

    def _reset(self, sums):
        # PITFALL: accumulators never reset: they keep the sum; only counters restart.
        self._reset_counters()
        for accumulator, grad in zip(self.accumulators, sums[0]):
            accumulator.assign(grad)


class MissingNormalization(AccumulationTrainer):
    """Micro-batch mean losses are summed, never divided by ``accumulation_steps``.

    Symptom: training as if the learning rate were ``accumulation_steps``
    times larger (it diverges where the same learning rate did not).
    Cause: each micro-batch's loss is its own mean; adding k of them without
    dividing gives k times the big batch's gradient.
    Fix: divide the window's summed loss by its sample count.
    Detect: with SGD the first update is exactly ``accumulation_steps`` times
    the exact one.
    """

    def _micro_objective(self, loss_sum, normalizer):
        # PITFALL: each micro-batch contributes its mean loss...
        return tf.math.divide_no_nan(loss_sum, normalizer), 1.0

    def _window_divisor(self, normalizer, micro_steps):
        # PITFALL: ...and the window's sum of means is never divided.
        return tf.ones_like(normalizer)


class DroppedTail(AccumulationTrainer):
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # PITFALL: whatever `tail` says, partial windows are thrown away.
        self.tail = "drop"


class UpdateEveryMicroStep(AccumulationTrainer):
    """Gradients are applied on every micro-batch as well as at the window's end.

    Symptom: ``optimizer.iterations`` grows k+1 times per window; training
    behaves like a small batch with an extra, larger step.
    Cause: an ``apply_gradients`` left inside the micro-batch loop (one of the
    articles this project grew from does exactly this).
    Fix: apply only once per window.
    Detect: ``optimizer.iterations == (k + 1) * windows``; with SGD the first
    window moves the weights about k+1 times as far as the exact one.
    """

    def _micro_step(self, element):
        grads, objective, count, normalizer = super()._micro_step(element)
        # PITFALL: the micro-batch's own mean gradient is applied at once, too.
        self._apply([tf.math.divide_no_nan(g, normalizer) for g in grads])
        return grads, objective, count, normalizer


class ZeroedWeights(MissingReset):
    """The "reset" zeroes the model's variables instead of the accumulators.

    (So the accumulators are not reset either: it is :class:`MissingReset`
    with the weights wiped as well.)

    Symptom: the loss jumps back to that of an all-zero model after every
    update; nothing is learned.
    Cause: ``for var in model.trainable_variables: var.assign(zeros)`` where
    the accumulators were meant.
    Fix: zero the accumulators.
    Detect: every weight is exactly zero after an update.
    """

    def _reset(self, sums):
        # PITFALL: zeroes the model's weights; the accumulators keep their sums.
        for variable in self.model.trainable_variables:
            variable.assign(tf.zeros(variable.shape, dtype=variable.dtype))
        super()._reset(sums)


class MeanOfMeans(AccumulationTrainer):
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

    def _micro_objective(self, loss_sum, normalizer):
        # PITFALL: the micro-batch's mean, counted as one unit of the window.
        return tf.math.divide_no_nan(loss_sum, normalizer), 1.0


class PerMicroBatchClipping(AccumulationTrainer):
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

    def __init__(self, model, optimizer, *args, **kwargs):
        super().__init__(model, optimizer, *args, **kwargs)
        clip = {
            "global_clipnorm": getattr(optimizer, "global_clipnorm", None),
            "clipnorm": getattr(optimizer, "clipnorm", None),
            "clipvalue": getattr(optimizer, "clipvalue", None),
        }
        clip = {key: value for key, value in clip.items() if value is not None}
        if not clip:
            raise ValueError(
                "`optimizer` must clip (global_clipnorm, clipnorm or clipvalue) for "
                "PerMicroBatchClipping to show anything. Received an optimizer without "
                "clipping."
            )
        self._clip_kind, self._clip_value = next(iter(clip.items()))

    def _clip(self, grads):
        if self._clip_kind == "global_clipnorm":
            return tf.clip_by_global_norm(grads, self._clip_value)[0]
        if self._clip_kind == "clipnorm":
            return [tf.clip_by_norm(g, self._clip_value) for g in grads]
        return [tf.clip_by_value(g, -self._clip_value, self._clip_value) for g in grads]

    def _micro_gradients(self, x, y, sample_weight):
        grads, objective, count, normalizer = super()._micro_gradients(x, y, sample_weight)
        # PITFALL: the micro-batch's mean gradient is clipped before accumulation.
        mean = [tf.math.divide_no_nan(g, normalizer) for g in grads]
        return [g * normalizer for g in self._clip(mean)], objective, count, normalizer


class RegularizerEveryMicroStep(AccumulationTrainer):
    """``model.losses`` is added to every micro-batch's loss: k times per update.

    Symptom: weight decay ``accumulation_steps`` times stronger than asked;
    weights shrink as accumulation grows.
    Cause: the regularization penalty is part of each micro-batch's loss, but
    only the data loss is normalized over the window.
    Fix: add the penalty once per update.
    Detect: with SGD the first update differs from the exact one by exactly
    ``(k - 1) * lr * grad(penalty)`` at the initial weights.
    """

    def _regularization(self, micro_steps):
        penalty, grads = super()._regularization(micro_steps)
        # PITFALL: one penalty per micro-step in the window, not one per update.
        times = tf.cast(micro_steps, tf.float32)
        return penalty * times, None if grads is None else [g * times for g in grads]


class UnderScaledTail(AccumulationTrainer):
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

    def _window_divisor(self, normalizer, micro_steps):
        # PITFALL: the divisor of a full window, whatever this one holds.
        full = tf.cast(self.accumulation_steps, normalizer.dtype)
        return normalizer * full / tf.cast(tf.maximum(micro_steps, 1), normalizer.dtype)


class CarriedTail(AccumulationTrainer):
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

    def __init__(self, *args, **kwargs):
        kwargs.pop("tail", None)
        # PITFALL: the partial window waits for the next epoch.
        super().__init__(*args, tail="carry", **kwargs)


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
