"""The trainer's state between graph calls: counters and a carried window.

Everything here is a ``tf.Variable``, so it lives in the graph and in
checkpoints. Counters are global (the same on every replica). A window's
sums live in loop tensors inside one graph call; only a window that must
outlive the call (``tail="carry"``, or a rule whose next window starts
from the last one's sums) is kept, in a
:class:`~gaviz.training.window.window_store.WindowStore`, each replica keeping its share.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz.training.window.window_store import WindowStore


class TrainerState(tf.Module):
    """Counters and the window a call leaves open.

    Attributes:
        micro_step: micro-batches consumed since the trainer was made.
        skipped_windows: windows a loss-scaling optimizer skipped.
        array_cursor: the next row to read when ``fit`` is given arrays.
        window: the open window (its ``micro_steps``; its sums once
            :meth:`build` is called with ``carries=True``).
    """

    def __init__(self, strategy):
        super().__init__(name="trainer_state")
        self.strategy = strategy
        with strategy.scope():
            self.micro_step = _counter("micro_step")
            self.skipped_windows = _counter("skipped_windows")
            # The next row of the epoch's order, for arrays cut in the graph.
            self.array_cursor = _counter("array_cursor")
        self.window = WindowStore(strategy, "carried_window")

    def build(self, variables, carries: bool, sparse=frozenset()) -> None:
        """Creates the window's per-variable sums if a window may be carried into
        the next call (occurrences for the variables in ``sparse``, by index:
        their gradients arrive as ``tf.IndexedSlices``)."""
        if carries:
            self.window.build(variables, gradients=False, sparse=sparse)

    @property
    def carries(self) -> bool:
        return self.window.built

    @property
    def micro_steps_in_window(self):
        """Micro-batches in the window a call left open (0: none)."""
        return self.window.micro_steps


def _counter(name):
    return tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
