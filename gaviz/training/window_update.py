"""A window's last two phases: finish its sums, then apply or skip the update.

Finish: the weight penalty (counted as the rule says), the divisor, the
window's loss and gradient, and whether they are finite. Apply: one
optimizer step, which a loss-scaling optimizer may skip (its scaled
gradients overflowed); the trainer counts such windows. A rule may move the
optimizer's moving average of the weights before the step, too.
"""

from __future__ import annotations

import contextlib

import keras
import tensorflow as tf

from gaviz import _keras
from gaviz.training import rules, window
from gaviz.training.micro_step import Reach, gradients, regularized_weights
from gaviz.training.objective import Objective
from gaviz.training.window import WindowSums


class WindowUpdate:
    """Finishes a window and steps the optimizer with it.

    Args:
        model: the trained ``keras.Model``.
        optimizer: its optimizer (a ``LossScaleOptimizer`` may skip a step).
        objective: what makes the loss (an :class:`~gaviz.training.objective.Objective`,
            or the model's own :class:`~gaviz.training.own_loss.OwnLoss`): its
            ``normalize``, and whether its loss ``includes_weight_penalty``.
        rule: the window's arithmetic (:data:`gaviz.training.rules.EXACT` when exact).
        skipped_windows: the counter of windows a loss-scaling optimizer skipped.
    """

    def __init__(self, model, optimizer, objective: Objective, rule: rules.Rule, skipped_windows,
                 reach: Reach | None = None):
        self.model, self.optimizer, self.objective = model, optimizer, objective
        self.rule, self.skipped_windows = rule, skipped_windows
        self.reach = reach or Reach()
        self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def finish(self, totals: WindowSums, steps, k):
        """``(loss, gradient, finite)`` of the window, by the rule."""
        penalty, penalty_grads = self._weight_penalty(steps)
        divisor = self.rule.divisor(totals.normalizer, steps, k)
        if self.objective.normalize == "sum":  # the loss's reduction is "sum"
            divisor = tf.ones_like(divisor)
        loss = tf.math.divide_no_nan(totals.loss_sum, divisor) + penalty
        grads = window.finish(totals.gradients, divisor, penalty_grads)
        if self.loss_scaled:
            # Scaled gradients may overflow: the optimizer skips such a window
            # and lowers its scale. Only a non-finite loss is an error.
            return loss, grads, tf.reduce_all(tf.math.is_finite(loss))
        return loss, grads, window.all_finite(loss, grads)

    def _weight_penalty(self, steps):
        """Weight regularization and its gradient, counted as the rule says."""
        regularized = regularized_weights(self.model)
        if not regularized or self.objective.includes_weight_penalty:
            return tf.constant(0.0), None
        times = self.rule.penalty_times(steps)
        with tf.GradientTape() as tape:
            penalty = tf.add_n([tf.cast(v.regularizer(v), tf.float32) for v in regularized])
        grads = gradients(tape, penalty, self.model.trainable_variables)
        return penalty * times, [g * tf.cast(times, g.dtype) for g in grads]

    def update(self, apply, grads, micro_steps=None, steps=None):
        """Applies ``grads`` if ``apply`` (a boolean tensor); True if an update
        really happened (a loss-scaling optimizer may skip one).

        ``micro_steps``: micro-batches consumed up to the end of this window
        (read only by a rule with a ``schedule_step``); ``steps``: the
        window's micro-steps (read only by a rule with ``ema_updates_before_apply``).
        """
        if not self.loss_scaled:
            return when(apply, lambda: self.apply(grads, micro_steps, steps))
        before = tf.identity(self.optimizer.iterations.value)
        when(apply, lambda: self.apply(grads, micro_steps, steps))
        skipped = tf.logical_and(apply, tf.equal(self.optimizer.iterations.value, before))
        when(skipped, lambda: self.skipped_windows.assign_add(1))
        return tf.logical_and(apply, tf.logical_not(skipped))

    def apply(self, grads, micro_steps=None, steps_in_window=None):
        """One optimizer step with ``grads`` (float32 sums), cast to each weight's
        dtype, of the variables the loss reaches (:class:`Reach`).

        ``steps_in_window``: the window's micro-steps, for a rule with
        ``ema_updates_before_apply``: the optimizer's moving average moves
        ``ema_updates_before_apply(steps_in_window)`` times towards the weights
        before the step (the step then moves it once more, as always).
        """
        variables = self.model.trainable_variables
        if self.rule.ema_updates_before_apply is not None and steps_in_window is not None:
            _move_average(self.optimizer, variables,
                          self.rule.ema_updates_before_apply(steps_in_window))
        step = None
        if self.rule.schedule_step is not None and micro_steps is not None:
            step = self.rule.schedule_step(micro_steps)
        grads = self.reach.reached(grads, self._penalized())
        with _schedule_read_at(self.optimizer, step):
            apply_to(self.optimizer, grads, variables)

    def _penalized(self) -> set:
        """The variables the window's weight penalty reaches (added here, not
        in the micro-steps' loss): their regularizer's."""
        if self.objective.includes_weight_penalty:
            return set()
        regularized = {id(v) for v in regularized_weights(self.model)}
        return {i for i, v in enumerate(self.model.trainable_variables) if id(v) in regularized}


def when(condition, action):
    """Runs ``action()`` in the graph where the boolean tensor ``condition``
    holds (a ``tf.cond``; its result is dropped); returns ``condition``."""

    def run():
        action()
        return tf.constant(True)

    return tf.cond(condition, run, lambda: tf.constant(False))


def apply_to(optimizer, grads, variables):
    """One optimizer step: a window's gradient (float32 sums over its count),
    cast to each variable's dtype. The trainer and :class:`gaviz.Accumulator`
    both update through here. A None gradient: the variable is left out, by
    Keras's own rule (``_filter_empty_gradients``: not updated, not decayed,
    and a warning names it), as in ``Model.fit``."""
    optimizer.apply_gradients([(None if g is None else tf.cast(g, v.dtype), v)
                               for g, v in zip(grads, variables)])


def _move_average(optimizer, variables, times):
    """Moves ``optimizer``'s moving average of ``variables`` towards them ``times``
    times (a tensor), each move Keras's own (see gaviz/_keras.py)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    times = tf.convert_to_tensor(times)

    def move(done):
        _keras.move_moving_average(inner, variables)
        return done + 1

    tf.while_loop(lambda done: done < times, move, [tf.zeros_like(times)])


@contextlib.contextmanager
def _schedule_read_at(optimizer, step):
    """Meanwhile (at trace time), ``optimizer``'s learning-rate schedule reads
    ``step`` instead of the optimizer's count of updates (None: unchanged).

    Keras's optimizers read a schedule as ``_learning_rate(_iterations)``, and
    a callable ``_learning_rate`` with no argument (see gaviz/_keras.py).
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = _keras.learning_rate_source(inner)
    if step is None or not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        yield
        return
    _keras.set_learning_rate_source(inner, lambda: schedule(step))
    try:
        yield
    finally:
        _keras.set_learning_rate_source(inner, schedule)
