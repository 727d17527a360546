"""The trainer's state between graph calls: counters and a carried window.

Everything here is a ``tf.Variable``, so it lives in the graph and in
checkpoints. Counters are global (the same on every replica). A window's
sums live in loop tensors inside one graph call; only a window that must
outlive the call (``tail="carry"``, or a subclass whose next window starts
from the last one's sums) is kept here, each replica keeping its own share.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz.training import window
from gaviz.training.window import WindowSums


class TrainerState(tf.Module):
    """Counters and, when asked for, the carried window's sums.

    Attributes:
        micro_step: micro-batches consumed since the trainer was made.
        micro_steps_in_window: micro-batches in the carried window.
        skipped_windows: windows a loss-scaling optimizer skipped.
        array_cursor: the next row to read when ``fit`` is given arrays.
        window_loss_sum, window_sample_count, window_normalizer, window_rows: the carried
            window's scalar sums, per replica (read across replicas: the total).
        accumulators: the carried window's gradient sums, per replica; empty
            until :meth:`build` is called with ``carry=True``.
    """

    def __init__(self, strategy):
        super().__init__(name="trainer_state")
        self.strategy = strategy
        with strategy.scope():
            self.micro_step = _counter("micro_step")
            self.micro_steps_in_window = _counter("micro_steps_in_window")
            self.skipped_windows = _counter("skipped_windows")
            # The next row of the epoch's order, for arrays cut in the graph.
            self.array_cursor = _counter("array_cursor")
            self.window_sample_count = _replica_local(0.0, "window_sample_count")
            self.window_normalizer = _replica_local(0.0, "window_normalizer")
            self.window_loss_sum = _replica_local(0.0, "window_loss_sum")
            self.window_rows = _replica_local(0.0, "window_rows")
        self.accumulators = []

    def build(self, variables, carry: bool) -> None:
        """Creates one accumulator per variable if windows must outlive a call."""
        if not carry or self.accumulators:
            return
        with self.strategy.scope():
            self.accumulators = [
                _replica_local(
                    tf.zeros(v.shape, dtype=window.accumulator_dtype(v)),
                    "accumulator_" + v.name.replace("/", "_").replace(":", "_"),
                )
                for v in variables
            ]

    def forget_window_variables(self) -> None:
        """Drops the carried window's accumulators (the variables they were made
        for changed): :meth:`build` makes new ones."""
        self.accumulators = []

    @property
    def carries(self) -> bool:
        return bool(self.accumulators)

    def replica_load(self, variables) -> WindowSums:
        """This replica's share of the carried window (zeros when nothing is carried)."""
        if not self.carries:
            return window.zeros(variables)
        return WindowSums(
            [a.read_value() for a in self.accumulators],
            self.window_loss_sum.read_value(),
            self.window_sample_count.read_value(),
            self.window_normalizer.read_value(),
            self.window_rows.read_value(),
        )

    def replica_store(self, sums: WindowSums) -> None:
        """Keeps this replica's share of an unfinished window for the next call."""
        for accumulator, grad in zip(self.accumulators, sums.gradients):
            accumulator.assign(grad)
        self.window_loss_sum.assign(sums.loss_sum)
        self.window_sample_count.assign(sums.sample_count)
        self.window_normalizer.assign(sums.normalizer)
        self.window_rows.assign(sums.rows)


def _counter(name):
    return tf.Variable(0, dtype=tf.int64, trainable=False, name=name)


def _replica_local(initial_value, name):
    """A variable each replica updates on its own; read across replicas, the sum."""
    return tf.Variable(
        initial_value,
        trainable=False,
        name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
    )
