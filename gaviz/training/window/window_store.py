"""Where a window's sums live between calls: :class:`WindowStore`, replica-local
variables (the Accumulator's window, which spans calls, and the window the
trainer carries into the next epoch). Inside one graph call the trainer's
sums are loop tensors instead (:mod:`gaviz.training.loop.window_loop`)."""

from __future__ import annotations

import tensorflow as tf

from gaviz.training.window import arithmetic
from gaviz.training.window.arithmetic import WindowSums


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
                _replica_local(tf.zeros(v.shape, arithmetic.sum_dtype(v)), _sum_name(v))
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
            return arithmetic.zeros(variables)
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
