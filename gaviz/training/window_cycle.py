"""A window's life, written once for the trainer and :class:`gaviz.Accumulator`.

After its micro-batches are added (:func:`gaviz.training.window.add`), a window is

1. **reduced**: its sums across replicas, in one batched all-reduce
   (:func:`all_reduce`), so every replica holds the window's totals;
2. **finished**: divided once (the rule's divisor: the window's count, or
   nothing for a ``"sum"`` loss), the weight penalty added, and found finite
   or not (:meth:`WindowCycle.finish`);
3. **judged**: due or not, and refused where a count is invalid, the gradient
   is not finite, or its variables with a gradient are not among those the
   update was traced for (:meth:`WindowCycle.judge`, a :data:`verdict <APPLIED>`);
4. **applied**: one optimizer step, of the variables that had a gradient, in
   cross-replica context, so that the optimizer clips the window's gradient; a
   loss-scaling optimizer may skip it, which is counted (:meth:`WindowCycle.apply`);
5. **emptied**: the next window starts from zeros, or from what the rule says
   (:meth:`WindowCycle.empty`).

Where the sums live is what varies: in loop tensors inside one graph call,
the trainer's fast path (:mod:`gaviz.training.window_loop`), or in
replica-local variables, a :class:`WindowStore`: the Accumulator's window,
which spans calls, and a window the trainer carries into the next epoch.
How a refused window is said varies too: the trainer reports each window to
Python, which raises; the Accumulator raises or asserts (accumulator.py).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, NamedTuple

import keras
import tensorflow as tf

from gaviz import _keras
from gaviz.training import optimizers, rules, window
from gaviz.training.window import WindowSums

#: A window's verdict, an int32 in the graph: not due, applied, or refused (why).
NOT_DUE, APPLIED, BAD_COUNT, NOT_FINITE, UNFORESEEN_GRADIENTS = -1, 0, 1, 2, 3
#: The verdicts that refuse a due window: it is discarded, not applied.
REFUSALS = (BAD_COUNT, NOT_FINITE, UNFORESEEN_GRADIENTS)


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
        rule: the window's arithmetic (:data:`gaviz.training.rules.EXACT`).
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

    def finish(self, totals: WindowSums, steps, k, count=None) -> Finished:
        """The window's loss and gradient: its sums divided once (the rule's
        divisor of the window's ``count``, by default ``totals.normalizer``)
        plus the weight penalty (counted as the rule says). ``totals`` may be
        one replica's share of the window, given its total ``count``."""
        penalty, penalty_grads = self._penalty(steps)
        count = totals.normalizer if count is None else count
        divisor = self.rule.divisor(count, steps, k)
        if not self.divides:
            divisor = tf.ones_like(divisor)
        loss = tf.math.divide_no_nan(totals.loss_sum, divisor) + penalty
        grads = window.finish(totals.gradients, divisor, penalty_grads)
        if self.loss_scaled:
            return Finished(loss, grads, tf.reduce_all(tf.math.is_finite(loss)))
        return Finished(loss, grads, window.all_finite(loss, grads))

    def _penalty(self, steps):
        if not self.penalized():
            return tf.constant(0.0), None
        penalty, grads = self.penalty()
        times = self.rule.penalty_times(steps)
        variables = self.variables()
        grads = [tf.zeros(v.shape, window.accumulator_dtype(v)) if g is None
                 else g * tf.cast(times, g.dtype) for g, v in zip(grads, variables)]
        return penalty * times, grads

    def penalized(self) -> frozenset:
        """The variables the penalty reaches (their regularizers'), by index."""
        return frozenset() if self.penalty is None else self.penalty.reaches()

    # -------------------------------------------------------------- 3. judge

    def judge(self, due, finite, count=None, invalid=None, foreseen=None):
        """The verdict on a window: ``NOT_DUE`` where ``due`` is false, else
        ``APPLIED`` or a refusal: ``BAD_COUNT`` (an ``invalid`` count of a
        micro-batch, or a total ``count`` not > 0), ``NOT_FINITE`` (``finite``
        false), or ``UNFORESEEN_GRADIENTS`` (``foreseen`` false: its variables
        with a gradient are not among those the update was traced for)."""
        verdict = tf.constant(APPLIED)
        if foreseen is not None:
            verdict = tf.where(foreseen, verdict, UNFORESEEN_GRADIENTS)
        verdict = tf.where(finite, verdict, NOT_FINITE)
        if count is not None:
            bad = tf.logical_not(count > 0)
            if invalid is not None:
                bad = tf.logical_or(bad, invalid > 0)
            verdict = tf.where(bad, BAD_COUNT, verdict)
        return tf.where(due, verdict, NOT_DUE)

    # -------------------------------------------------------------- 4. apply

    def apply(self, applies, grads, patterns=None, chosen=0, micro_steps=None, steps=None,
              per_replica=None):
        """Steps the optimizer with ``grads`` where ``applies`` (a boolean
        tensor); returns whether an update really happened (a loss-scaling
        optimizer may skip one: counted in ``skipped_windows``).

        ``patterns``: the sets of variables (by index) that may have had a
        gradient, ``chosen`` the one this window had (each is a branch with a
        whole optimizer step); None: every variable. ``micro_steps`` (the
        micro-batches consumed by the window's end) and ``steps`` (the
        window's micro-steps) are read only by a rule with a
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
        patterns = patterns or [tuple(range(len(self.variables())))]
        branches = [self._stepping(grads, p, micro_steps, steps, per_replica) for p in patterns]
        action = branches[0] if len(branches) == 1 else (
            lambda: tf.switch_case(chosen, [_returning_true(b) for b in branches]))
        if not self.loss_scaled:
            return when(applies, action)
        before = tf.identity(self.optimizer.iterations.value)
        when(applies, action)
        skipped = tf.logical_and(applies, tf.equal(self.optimizer.iterations.value, before))
        if self.skipped_windows is not None:
            when(skipped, lambda: self.skipped_windows.assign_add(1))
        return tf.logical_and(applies, tf.logical_not(skipped))

    def _stepping(self, grads, pattern, micro_steps, steps, per_replica):
        """The optimizer step of one pattern, as a function of nothing."""
        if per_replica is None:
            return functools.partial(self.step, grads, pattern, micro_steps, steps)
        return lambda: per_replica.extended.call_for_each_replica(
            lambda: self.step(grads(), pattern, micro_steps, steps))

    def step(self, grads, pattern=None, micro_steps=None, steps=None):
        """One optimizer step with ``grads`` (float32 sums over the count), of
        the variables in ``pattern`` (by index; None: all): the others get
        None, which Keras's optimizer leaves out (not moved, not decayed, and
        named in its warning), as ``Model.fit`` leaves out a variable the loss
        does not reach. A window that gave no variable a gradient steps none."""
        variables = self.variables()
        if pattern is not None:
            if not pattern:
                return
            if self.hands_left_out:
                grads = [g if i in pattern else None for i, g in enumerate(grads)]
            else:
                grads, variables = [grads[i] for i in pattern], [variables[i] for i in pattern]
        if self.rule.ema_updates_before_apply is not None and steps is not None:
            _move_average(self.optimizer, variables, self.rule.ema_updates_before_apply(steps))
        schedule_step = None
        if self.rule.schedule_step is not None and micro_steps is not None:
            schedule_step = self.rule.schedule_step(micro_steps)
        with _schedule_read_at(self.optimizer, schedule_step):
            apply_to(self.optimizer, grads, variables)

    # -------------------------------------------------------------- 5. empty

    def empty(self, sums: WindowSums, fresh: WindowSums | None = None) -> WindowSums:
        """What the window after ``sums`` starts from: ``fresh`` (zeros by
        default) as the rule has it (exact: ``fresh`` itself)."""
        if fresh is None:
            fresh = tf.nest.map_structure(tf.zeros_like, sums)
        return self.rule.next_window(sums, fresh, self.variables())


# ---------------------------------------------------------------- 1. reduce

def all_reduce(nest):
    """In replica context: every tensor of ``nest`` summed across replicas, in
    one batched all-reduce; the same totals on every replica."""
    # identity places loop outputs on this replica's device (all_reduce
    # needs to know where each value lives).
    local = tf.nest.map_structure(tf.identity, nest)
    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)


def reduced(strategy, replica_fn):
    """In cross-replica context: the totals ``replica_fn()`` gives on every
    replica (it all-reduces), as one value."""
    per_replica = strategy.extended.call_for_each_replica(replica_fn)
    return strategy.experimental_local_results(per_replica)[0]


# ---------------------------------------------------------------- the store

class WindowStore(tf.Module):
    """A window whose sums live in variables, each replica keeping its share
    (read across replicas: the sum): the Accumulator's, which spans calls, and
    the trainer's when it carries a window into the next epoch.

    Attributes:
        gradient_sums: per variable, its summed gradient (after :meth:`build`
            with ``gradients=True``; float32, float64 for float64 variables).
        loss_sum, sample_count, normalizer, rows: the window's scalar sums.
        micro_steps: micro-batches in the window (the same on every replica).
        invalid_counts: micro-batches whose count was invalid (the
            Accumulator's, added where XLA dropped the check).
        had_gradient: per variable, whether a micro-batch gave it a gradient
            (the Accumulator's; after :meth:`build`).
    """

    def __init__(self, strategy, name: str = "window"):
        super().__init__(name=name)
        self.strategy = strategy
        with strategy.scope():
            self.loss_sum = _replica_local(0.0, "loss_sum")
            self.sample_count = _replica_local(0.0, "sample_count")
            self.normalizer = _replica_local(0.0, "normalizer")
            self.rows = _replica_local(0.0, "rows")
            self.invalid_counts = _replica_local(0.0, "invalid_counts")
            self.micro_steps = _same_on_every_replica(0, tf.int64, "micro_steps")
        self.gradient_sums, self.had_gradient = [], None

    def build(self, variables, gradients: bool = True) -> None:
        """Creates the per-variable sums (once; ``gradients``: also the flags
        of which variables had a gradient)."""
        if self.gradient_sums:
            return
        with self.strategy.scope():
            self.gradient_sums = [
                _replica_local(tf.zeros(v.shape, window.accumulator_dtype(v)), _sum_name(v))
                for v in variables
            ]
            if gradients:
                self.had_gradient = _same_on_every_replica([False] * len(variables), tf.bool,
                                                           "had_gradient")

    def forget(self) -> None:
        """Drops the per-variable sums (the variables they were made for
        changed): :meth:`build` makes new ones."""
        self.gradient_sums, self.had_gradient = [], None

    @property
    def built(self) -> bool:
        return bool(self.gradient_sums)

    def read(self, variables=None) -> WindowSums:
        """This replica's share of the window (zeros for ``variables`` when
        not built)."""
        if not self.built:
            return window.zeros(variables)
        return WindowSums([s.read_value() for s in self.gradient_sums],
                          self.loss_sum.read_value(), self.sample_count.read_value(),
                          self.normalizer.read_value(), self.rows.read_value())

    def write(self, sums: WindowSums) -> None:
        """Keeps this replica's share of ``sums``."""
        for total, value in zip(self.gradient_sums, sums.gradients):
            total.assign(value)
        self.loss_sum.assign(sums.loss_sum)
        self.sample_count.assign(sums.sample_count)
        self.normalizer.assign(sums.normalizer)
        self.rows.assign(sums.rows)

    def add(self, micro: WindowSums, invalid=0.0, reached=None) -> None:
        """Adds one micro-batch (this replica's share), ``invalid`` if its count
        was, and ``reached``: which variables it gave a gradient."""
        self.write(window.add(self.read(), micro))
        self.invalid_counts.assign_add(tf.cast(invalid, tf.float32))
        if reached is not None:
            self.had_gradient.assign(tf.logical_or(self.had_gradient.read_value(), reached))
        self.micro_steps.assign_add(1)

    def restart(self, sums: WindowSums) -> None:
        """This replica's share of the next window: ``sums`` (an emptied one)."""
        self.write(sums)
        self.invalid_counts.assign(0.0)
        if self.had_gradient is not None:
            self.had_gradient.assign(tf.zeros_like(self.had_gradient.read_value()))
        self.micro_steps.assign(0)


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


def _replica_local(initial_value, name):
    """A variable each replica updates on its own; read across replicas, the sum."""
    return tf.Variable(
        initial_value, trainable=False, name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
    )


def _same_on_every_replica(initial_value, dtype, name):
    """A variable every replica updates alike; read across replicas, the first's."""
    return tf.Variable(
        initial_value, dtype=dtype, trainable=False, name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


def _sum_name(variable) -> str:
    name = getattr(variable, "path", None) or variable.name
    return "gradient_sum_" + name.replace("/", "_").replace(":", "_")
