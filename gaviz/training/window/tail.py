"""What becomes of a partial window at the end of an epoch (``tail``), in one place.

- ``"flush"`` (exact): applied, divided by its own count, when the data ends;
- ``"drop"``: discarded;
- ``"carry"``: kept open into the next epoch (Keras's built-in does this).

The trainer's window loop and :class:`gaviz.Accumulator` (whose tail is
``"flush"``: ``flush()`` applies a partial window) ask a :class:`Tail` whether
a window is due and whether it closes; ``fit`` asks it how many updates an
epoch holds and whether an epoch is long enough for its policy.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import tensorflow as tf

#: The tail policies, the exact one first.
POLICIES = ("flush", "drop", "carry")


class Tail(NamedTuple):
    """One of :data:`POLICIES`, and what it decides."""

    policy: str = "flush"

    @property
    def carries(self) -> bool:
        """Whether a window may stay open at the end of the data (into the next call)."""
        return self.policy == "carry"

    def closes(self, full):
        """Whether a window closes (a Python True where only ``"carry"`` keeps one
        open: no conditional over every sum in each window)."""
        return full if self.carries else True

    def due(self, full, exhausted, micro_steps):
        """Whether a window is applied: a full one, or with ``"flush"`` a
        partial one that holds micro-batches where the data ended (whatever
        its loss counts: with every row masked, ``Model.fit`` still takes a
        step, of a zero gradient, that moves momentum and ``iterations``)."""
        if self.policy != "flush":
            return full
        return tf.logical_or(full, tf.logical_and(exhausted, micro_steps > 0))

    def updates_per_epoch(self, micro_batches: int | None, accumulation_steps: int,
                          carried: int = 0) -> int | None:
        """Updates in an epoch of ``micro_batches`` (None when unknown); with
        ``"carry"`` the epoch's windows continue the ``carried`` micro-batches of
        the window the epoch before left open."""
        if micro_batches is None:
            return None
        if self.policy == "flush":
            return -(-micro_batches // accumulation_steps)
        if self.carries:
            return (carried + micro_batches) // accumulation_steps
        return micro_batches // accumulation_steps

    def check_epoch_length(self, micro_batches: int | None, accumulation_steps: int,
                           stacklevel: int = 2) -> None:
        """An epoch shorter than one window: with ``"drop"`` no update would ever
        happen (raised); with ``"carry"`` each window spans epochs (warned).

        Raises:
            ValueError: ``"drop"`` and an epoch shorter than a window.
        """
        if micro_batches is None or self.policy == "flush" or micro_batches >= accumulation_steps:
            return
        message = (
            f"An epoch has {micro_batches} micro-batches, fewer than accumulation_steps="
            f"{accumulation_steps}, so no window fills within an epoch."
        )
        if self.policy == "drop":
            raise ValueError(
                f"{message} With tail=\"drop\" every window would be dropped and the model "
                "would never be updated. Lower `accumulation_steps`, use smaller micro-batches, "
                'or use tail="flush".'
            )
        warnings.warn(f"{message} With tail=\"carry\" each window spans epochs.", UserWarning,
                      stacklevel=stacklevel + 1)
