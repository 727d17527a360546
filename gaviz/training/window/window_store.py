"""Where a window's sums live between calls: :class:`WindowStore`, replica-local
variables (the Accumulator's window, which spans calls, and the window the
trainer carries into the next epoch). Inside one graph call the trainer's
sums are loop tensors instead (:mod:`gaviz.training.loop.window_loop`)."""

from __future__ import annotations

import tensorflow as tf

from gaviz.training.window import arithmetic
from gaviz.training.window.arithmetic import WindowSums
from gaviz.training.window.occurrences import Occurrences, sum_dtype


class WindowStore(tf.Module):
    """A window whose sums live in variables, each replica keeping its share
    (read across replicas: the sum): the Accumulator's, which spans calls, and
    the trainer's when it carries a window into the next epoch.

    Attributes:
        gradient_sums: per variable, its summed gradient (after :meth:`build`;
            float32, float64 for float64 variables), or, for a variable whose
            gradient is sparse, an :class:`OccurrenceStore` of its occurrences.
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

    def build(self, variables, gradients: bool = True, sparse=frozenset()) -> None:
        """Creates the per-variable sums (once; ``gradients``: also the flags
        of which variables had a gradient), occurrences for those in ``sparse``
        (by index: their gradients arrive as ``tf.IndexedSlices``)."""
        if self.gradient_sums:
            return
        with self.strategy.scope():
            self.gradient_sums = [
                OccurrenceStore(v) if i in sparse else
                _replica_local(tf.zeros(v.shape, sum_dtype(v)), _sum_name(v))
                for i, v in enumerate(variables)
            ]
            if gradients:
                self.had_gradient = _same_on_every_replica([False] * len(variables), tf.bool,
                                                           "had_gradient")

    def keep_occurrences(self, variables, indices) -> None:
        """From now on keeps the occurrences of the variables at ``indices``
        (their gradients arrive as ``tf.IndexedSlices``) in place of a dense sum.
        May be called while a ``tf.function`` is traced, in replica context: the
        variables are made outside it."""
        def make():
            return [OccurrenceStore(v) if i in indices and not isinstance(s, OccurrenceStore)
                    else s for i, (s, v) in enumerate(zip(self.gradient_sums, variables))]

        self.gradient_sums = _made_outside_functions(self.strategy, make)

    @property
    def sparse(self) -> frozenset:
        """The variables (by index) whose occurrences are kept."""
        return frozenset(i for i, s in enumerate(self.gradient_sums)
                         if isinstance(s, OccurrenceStore))

    def forget(self) -> None:
        """Drops the per-variable sums (the variables they were made for
        changed): :meth:`build` makes new ones."""
        self.gradient_sums, self.had_gradient = [], None

    @property
    def built(self) -> bool:
        return bool(self.gradient_sums)

    def read(self, variables=None, sparse=frozenset()) -> WindowSums:
        """This replica's share of the window (when not built: zeros for
        ``variables``, no occurrences for those in ``sparse``)."""
        if not self.built:
            return arithmetic.zeros(variables, sparse)
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
        self.write(arithmetic.add(self.read(), micro))
        self.invalid_counts.assign_add(tf.cast(invalid, tf.float32))
        if reached is not None:
            self.had_gradient.assign(tf.logical_or(self.had_gradient.read_value(), reached))
        self.micro_steps.assign_add(1)

    def reset(self, sums: WindowSums) -> None:
        """This replica's share of the next window: ``sums`` (a reset one)."""
        self.write(sums)
        self.invalid_counts.assign(0.0)
        if self.had_gradient is not None:
            self.had_gradient.assign(tf.zeros_like(self.had_gradient.read_value()))
        self.micro_steps.assign(0)


class OccurrenceStore(tf.Module):
    """One variable's occurrences, kept between calls: each replica's rows
    and their indices, in variables whose number of rows changes."""

    def __init__(self, variable):
        super().__init__(name=_sum_name(variable).replace("gradient_sum_", "occurrences_"))
        # The variable's shape and the sums' dtype (not the variable: a
        # checkpoint of the window would hold the model's variable again).
        self.spec = tf.TensorSpec(variable.shape, sum_dtype(variable))
        row = list(variable.shape[1:])
        self.values = _replica_local(tf.zeros([0, *row], sum_dtype(variable)), "values",
                                     shape=tf.TensorShape([None, *row]))
        self.indices = _replica_local(tf.zeros([0], tf.int64), "indices",
                                      shape=tf.TensorShape([None]))

    def read_value(self) -> Occurrences:
        """This replica's occurrences, ready to be added to."""
        slices = tf.IndexedSlices(self.values.read_value(), self.indices.read_value(),
                                  tf.constant(list(self.spec.shape), tf.int64))
        return Occurrences.holding(slices, self.spec)

    def assign(self, occurrences) -> None:
        """Keeps ``occurrences`` (an :class:`Occurrences`, or a ``tf.IndexedSlices``)."""
        if isinstance(occurrences, Occurrences):
            occurrences = occurrences.gathered(self.spec)
        self.values.assign(tf.cast(occurrences.values, self.values.dtype))
        self.indices.assign(tf.cast(occurrences.indices, tf.int64))


def _made_outside_functions(strategy, make):
    """``make()`` where variables are made: out of any ``tf.function`` being
    traced, in ``strategy``'s cross-replica context (through ``merge_call``
    when called in a replica's)."""
    def made(_=None):
        with tf.init_scope():
            if tf.distribute.get_strategy() is strategy:
                return make()
            with strategy.scope():
                return make()

    context = tf.distribute.get_replica_context()
    return made() if context is None else context.merge_call(made)


def _replica_local(initial_value, name, shape=None):
    """A variable each replica updates on its own; read across replicas, the sum."""
    return tf.Variable(
        initial_value, trainable=False, name=name, shape=shape,
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
