"""A window's life, written once for the trainer and :class:`gaviz.Accumulator`.

After its micro-batches are added (:func:`~gaviz.training.window.arithmetic.add`),
a window is

1. **reduced**: its sums across replicas, in one batched all-reduce
   (:func:`all_reduce`), so every replica holds the window's totals;
2. **finished**: divided once (the rule's divisor: the window's count, or
   nothing for a ``"sum"`` loss), the weight penalty added, and found finite
   or not (:meth:`WindowCycle.finish`);
3. **judged**: due or not (the :class:`~gaviz.training.window.tail.Tail` decides),
   and refused where a count is invalid, the gradient is not finite
   (:meth:`WindowCycle.finite`), or its variables with a gradient are not
   among those the update was traced for (:meth:`WindowCycle.judge`, a
   :data:`verdict <ACCEPTED>`; :mod:`gaviz.training.window.refusals` says a refusal);
4. **applied**: one optimizer update, of the variables that had a gradient
   (:meth:`WindowCycle.patterns`, :meth:`WindowCycle.chosen`), in
   cross-replica context, so that the optimizer clips the window's gradient; a
   loss-scaling optimizer may skip it, which is counted (:meth:`WindowCycle.apply`);
5. **reset**: where the tail closes it (:func:`closing`), the next window
   starts from zeros, or from what the rule says (:meth:`WindowCycle.reset`).

Each decision is made here once, for both; where the sums live is what
varies: in loop tensors inside one graph call, the trainer's fast path
(:mod:`gaviz.training.loop.window_loop`), or in replica-local variables, a
:class:`~gaviz.training.window.window_store.WindowStore`: the Accumulator's
window, which spans calls, and a window the trainer carries into the next
epoch.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, NamedTuple

import keras
import tensorflow as tf

from gaviz import _keras
from gaviz.training.fit import optimizers
from gaviz.training.window import arithmetic, rules
from gaviz.training.window.arithmetic import WindowSums
from gaviz.training.window.verdicts import (
    ACCEPTED,
    BAD_COUNT,
    NOT_DUE,
    NOT_FINITE,
    UNFORESEEN_GRADIENTS,
)


class Finished(NamedTuple):
    """A finished window: its loss and gradient, and whether they are finite
    (with a loss scale, only the loss: the optimizer skips an overflow itself)."""

    loss: tf.Tensor
    gradients: list
    finite: tf.Tensor


class WindowCycle:
    """What happens to a window's sums, once they are added.

    Args:
        optimizer: the optimizer each update steps (a ``LossScaleOptimizer``
            may skip a window: counted in ``skipped_windows``).
        variables: ``() -> list``, the trained variables, read when called.
        rule: the window's arithmetic (:data:`gaviz.training.window.rules.EXACT`).
        divides: whether the window is divided by its count (False for a loss
            whose reduction is ``"sum"``).
        penalty: the weight penalty a window adds once (the rule may count it
            otherwise): called, ``(loss, gradients)``, a gradient None where
            it reaches no variable; ``penalty.reaches``, those it reaches, by
            index. None: the loss holds it already.
        skipped_windows: a counter of windows a loss scale skipped, or None.
        hands_left_out: hand the optimizer a None gradient for a variable left
            out of an update, which Keras's optimizer names in a warning, as
            ``Model.fit`` does (the trainer); or hand it only the others (the
            Accumulator, whose caller gave the None).
    """

    def __init__(self, optimizer, variables: Callable[[], list], rule: rules.Rule = rules.EXACT,
                 divides: bool = True, penalty: Callable | None = None, skipped_windows=None,
                 hands_left_out: bool = True):
        self.optimizer, self.variables, self.rule = optimizer, variables, rule
        self.divides, self.penalty, self.skipped_windows = divides, penalty, skipped_windows
        self.hands_left_out = hands_left_out
        self.loss_scaled = optimizers.loss_scaled(optimizer)

    # ------------------------------------------------------------ 2. finish

    def finish(self, totals: WindowSums, micro_steps_in_window, k, count=None) -> Finished:
        """The window's loss and gradient: its sums divided once (the rule's
        divisor of the window's ``count``, by default ``totals.normalizer``)
        plus the weight penalty (counted as the rule says). ``totals`` may be
        one replica's share of the window, given its total ``count``."""
        penalty, penalty_grads = self._penalty(micro_steps_in_window)
        count = totals.normalizer if count is None else count
        divisor = self.rule.divisor(count, micro_steps_in_window, k)
        if not self.divides:
            divisor = tf.ones_like(divisor)
        loss = tf.math.divide_no_nan(totals.loss_sum, divisor) + penalty
        grads = arithmetic.divide(totals.gradients, divisor, penalty_grads)
        return Finished(loss, grads, self.finite(loss, lambda: arithmetic.all_finite(0.0, grads)))

    def finite(self, loss, gradients_finite: Callable):
        """Whether a window counts as finite: its loss, and without a loss
        scale its gradient too (``gradients_finite()``, a boolean tensor);
        with one, the optimizer skips an overflowing gradient itself."""
        finite = tf.reduce_all(tf.math.is_finite(loss))
        if self.loss_scaled:
            return finite
        return tf.logical_and(finite, gradients_finite())

    def _penalty(self, micro_steps_in_window):
        if not self.penalized():
            return tf.constant(0.0), None
        penalty, grads = self.penalty()
        times = self.rule.penalty_times(micro_steps_in_window)
        return penalty * times, [None if g is None else g * tf.cast(times, g.dtype)
                                 for g in grads]

    def penalized(self) -> frozenset:
        """The variables the penalty reaches (their regularizers'), by index."""
        return frozenset() if self.penalty is None else self.penalty.reaches()

    # -------------------------------------------------------------- 3. judge

    def judge(self, due, finite, count=None, invalid=None, foreseen=None):
        """The verdict on a window: ``NOT_DUE`` where ``due`` is false, else
        ``ACCEPTED`` or a refusal: ``BAD_COUNT`` (an ``invalid`` count of a
        micro-batch, or a total ``count`` not > 0), ``NOT_FINITE`` (``finite``
        false), or ``UNFORESEEN_GRADIENTS`` (``foreseen`` false: its variables
        with a gradient are not among those the update was traced for)."""
        verdict = tf.constant(ACCEPTED)
        if foreseen is not None:
            verdict = tf.where(foreseen, verdict, UNFORESEEN_GRADIENTS)
        verdict = tf.where(finite, verdict, NOT_FINITE)
        if count is not None:
            bad = tf.logical_not(count > 0)
            if invalid is not None:
                bad = tf.logical_or(bad, invalid > 0)
            verdict = tf.where(bad, BAD_COUNT, verdict)
        return tf.where(due, verdict, NOT_DUE)

    # ------------------------------------------- 4. which variables update

    def patterns(self, seen) -> list:
        """The sets of variables (sorted index tuples) an update traced now
        may step: every union of ``seen``, the sets of variables the
        micro-steps traced so far gave a gradient (None: all), each with
        those the weight penalty reaches. Keras's optimizer leaves the others
        out, as ``Model.fit`` leaves out a variable the loss does not reach."""
        every = frozenset(range(len(self.variables())))
        unions = set()
        for pattern in seen or [every]:
            unions |= {pattern} | {pattern | other for other in unions}
        return sorted(tuple(sorted(p | self.penalized())) for p in unions)

    @staticmethod
    def chosen(patterns, had_gradient=None):
        """The index in ``patterns`` of the window's variables with a gradient
        (``had_gradient``, a boolean per variable; None: the one pattern), or
        ``len(patterns)`` when it is none of them."""
        if had_gradient is None:
            return tf.constant(0)
        table = tf.constant([[i in p for i in range(had_gradient.shape[0])] for p in patterns],
                            tf.bool)
        matches = tf.reduce_all(tf.equal(table, had_gradient[tf.newaxis]), axis=1)
        first = tf.argmax(tf.cast(matches, tf.int32), output_type=tf.int32)
        return tf.where(tf.reduce_any(matches), first, len(patterns))

    # -------------------------------------------------------------- 4. apply

    def apply(self, accepted, grads, patterns, chosen=0, micro_step=None,
              micro_steps_in_window=None, per_replica=None):
        """Updates with ``grads`` where ``accepted`` (a boolean tensor);
        returns whether an update really happened (a loss-scaling optimizer
        may skip one: counted in ``skipped_windows``).

        ``patterns``: the sets of variables (by index) that may have had a
        gradient (:meth:`patterns`), ``chosen`` the one this window had (each
        is a branch with a whole optimizer update). ``micro_step`` (the
        micro-batches consumed by the window's end) and
        ``micro_steps_in_window`` are read only by a rule with a
        ``schedule_step`` or ``ema_updates_before_apply``.

        Where the gradient is reduced across replicas varies, as data:

        - ``per_replica`` None (the trainer): ``grads`` is the window's whole
          gradient, all-reduced already, and the optimizer steps with it where
          this is called (outside any replica context, so it clips the
          window's gradient);
        - ``per_replica`` a strategy (the Accumulator, whose update may be
          decided inside ``strategy.run`` or a ``train_step``): ``grads`` is
          ``() -> gradients``, each replica's share over the window's count,
          and each replica steps the optimizer, which sums the shares (its one
          all-reduce). Keras's loss-scaling optimizer must be called in
          replica context; and the decision is taken outside it, since a
          ``cond`` around a step inside a replica fails (keras-team/keras#20582).
        """
        branches = [self._updating(grads, p, micro_step, micro_steps_in_window, per_replica)
                    for p in patterns]
        action = branches[0] if len(branches) == 1 else (
            lambda: tf.switch_case(chosen, [_returning_true(b) for b in branches]))
        if not self.loss_scaled:
            return when(accepted, action)
        before = tf.identity(self.optimizer.iterations.value)
        when(accepted, action)
        skipped = tf.logical_and(accepted, tf.equal(self.optimizer.iterations.value, before))
        if self.skipped_windows is not None:
            when(skipped, lambda: self.skipped_windows.assign_add(1))
        return tf.logical_and(accepted, tf.logical_not(skipped))

    def _updating(self, grads, pattern, micro_step, micro_steps_in_window, per_replica):
        """The optimizer update of one pattern, as a function of nothing."""
        if per_replica is None:
            return functools.partial(self.update, grads, pattern, micro_step,
                                     micro_steps_in_window)
        return lambda: per_replica.extended.call_for_each_replica(
            lambda: self.update(grads(), pattern, micro_step, micro_steps_in_window))

    def update(self, grads, pattern, micro_step=None, micro_steps_in_window=None):
        """One optimizer update with ``grads`` (float32 sums over the count),
        of the variables in ``pattern`` (by index): the others get None,
        which Keras's optimizer leaves out (not moved, not decayed, and named
        in its warning), as ``Model.fit`` leaves out a variable the loss does
        not reach. A window that gave no variable a gradient updates none."""
        variables = self.variables()
        if not pattern:
            return
        if self.hands_left_out:
            grads = [g if i in pattern else None for i, g in enumerate(grads)]
        else:
            grads, variables = [grads[i] for i in pattern], [variables[i] for i in pattern]
        if self.rule.ema_updates_before_apply is not None and micro_steps_in_window is not None:
            _move_average(self.optimizer, variables,
                          self.rule.ema_updates_before_apply(micro_steps_in_window))
        schedule_step = None
        if self.rule.schedule_step is not None and micro_step is not None:
            schedule_step = self.rule.schedule_step(micro_step)
        with _schedule_read_at(self.optimizer, schedule_step):
            apply_to(self.optimizer, grads, variables)

    # -------------------------------------------------------------- 5. reset

    def reset(self, sums: WindowSums) -> WindowSums:
        """What the window after ``sums`` starts from: zeros (and no
        occurrences), as the rule has it (exact: zeros)."""
        variables = self.variables()
        return self.rule.reset(sums, arithmetic.fresh(sums, variables), variables)


def closing(closes, close: Callable, stay: Callable):
    """``close()`` where the tail closes the window (``closes``: a Python
    True, or a boolean tensor where only ``"carry"`` may keep one open),
    else ``stay()``: no conditional over every sum where every window closes."""
    return close() if closes is True else tf.cond(closes, close, stay)


# ---------------------------------------------------------------- 1. reduce

def all_reduce(nest):
    """In replica context: every tensor of ``nest`` summed across replicas, in
    one batched all-reduce; the same totals on every replica. A
    ``tf.IndexedSlices`` (a window's occurrences) is all-gathered instead, as
    Keras's optimizer all-reduces one: the replicas' rows side by side."""
    context = tf.distribute.get_replica_context()
    flat = tf.nest.flatten(nest)
    sparse = {i for i, value in enumerate(flat) if isinstance(value, tf.IndexedSlices)}
    # identity places loop outputs on this replica's device (all_reduce
    # needs to know where each value lives).
    dense = [tf.identity(value) for i, value in enumerate(flat) if i not in sparse]
    summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, dense) if dense else [])
    totals = [_all_gathered(value, context) if i in sparse else next(summed)
              for i, value in enumerate(flat)]
    return tf.nest.pack_sequence_as(nest, totals)


def _all_gathered(slices: tf.IndexedSlices, context) -> tf.IndexedSlices:
    """Every replica's rows of ``slices``, in replica order, on every replica.

    Each replica's rows are padded to the longest's (at least one row: a
    collective of nothing crashes TensorFlow's CPU collectives) and gathered,
    the padding dropped after.
    """
    if context.num_replicas_in_sync == 1:
        return slices
    rows = tf.shape(slices.indices, out_type=tf.int64)[:1]
    lengths = context.all_gather(rows, axis=0)
    longest = tf.maximum(tf.reduce_max(lengths), 1)
    padding = [[0, longest - rows[0]]]
    values = tf.pad(slices.values, padding + [[0, 0]] * (slices.values.shape.rank - 1))
    indices = tf.pad(tf.cast(slices.indices, tf.int64), padding)
    keep = tf.reshape(tf.sequence_mask(lengths, longest), [-1])
    return tf.IndexedSlices(tf.boolean_mask(context.all_gather(values, axis=0), keep),
                            tf.boolean_mask(context.all_gather(indices, axis=0), keep),
                            slices.dense_shape)


def reduced(strategy, replica_fn):
    """In cross-replica context: the totals ``replica_fn()`` gives on every
    replica (it all-reduces), as one value."""
    per_replica = strategy.extended.call_for_each_replica(replica_fn)
    return strategy.experimental_local_results(per_replica)[0]


# ------------------------------------------------------------------ helpers

def when(condition, action):
    """Runs ``action()`` in the graph where the boolean tensor ``condition``
    holds (a ``tf.cond``; its result is dropped); returns ``condition``."""
    return tf.cond(condition, _returning_true(action), lambda: tf.constant(False))


def _returning_true(action):
    def run():
        action()
        return tf.constant(True)
    return run


def apply_to(optimizer, grads, variables):
    """One optimizer step: a window's gradient (float32 sums over its count),
    cast to each variable's dtype. A None gradient: the variable is left out,
    by Keras's own rule (``_filter_empty_gradients``: not updated, not
    decayed, and a warning names it), as in ``Model.fit``."""
    optimizer.apply_gradients([(None if g is None else tf.cast(g, v.dtype), v)
                               for g, v in zip(grads, variables)])


@contextlib.contextmanager
def _schedule_read_at(optimizer, step):
    """Meanwhile (at trace time), ``optimizer``'s learning-rate schedule reads
    ``step`` instead of the optimizer's count of updates (None: unchanged).

    Keras's optimizers read a schedule as ``_learning_rate(_iterations)``, and
    a callable ``_learning_rate`` with no argument (see gaviz/_keras.py).
    """
    inner = optimizers.inner(optimizer)
    schedule = _keras.learning_rate_source(inner)
    if step is None or not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        yield
        return
    _keras.set_learning_rate_source(inner, lambda: schedule(step))
    try:
        yield
    finally:
        _keras.set_learning_rate_source(inner, schedule)


def _move_average(optimizer, variables, times):
    """Moves ``optimizer``'s moving average of ``variables`` towards them ``times``
    times (a tensor), each move Keras's own (see gaviz/_keras.py)."""
    inner = optimizers.inner(optimizer)
    times = tf.convert_to_tensor(times)

    def move(done):
        _keras.move_moving_average(inner, variables)
        return done + 1

    tf.while_loop(lambda done: done < times, move, [tf.zeros_like(times)])
