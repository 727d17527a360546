"""How a window's arithmetic is done, as data: the exact rule and its variations.

A :class:`Rule` is a frozen set of pure functions the trainer calls at four
places: what one micro-batch contributes to the window, what the window is
divided by, how many times the weight penalty counts in an update, and
whether each micro-batch's gradient is clipped (with the optimizer's own
clipping) before it is added. :data:`EXACT` is the rule of the exact trainer;
the arithmetic pitfalls in :mod:`gaviz.pitfalls` are the exact trainer with
another rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import tensorflow as tf

from gaviz.window import WindowSums


def sum_contribution(micro: WindowSums) -> WindowSums:
    """Exact: a micro-batch adds its summed loss, gradient and its own sample count."""
    return micro


def normalizer_divisor(normalizer, micro_steps, accumulation_steps):
    """Exact: the window is divided by its sample count (or total weight)."""
    del micro_steps, accumulation_steps  # the count already says how full it was
    return normalizer


def once_per_update(micro_steps):
    """Exact: the weight penalty counts once per update, however long the window."""
    del micro_steps
    return tf.constant(1.0)


@dataclass(frozen=True)
class Rule:
    """The arithmetic of a window, as pure functions.

    Attributes:
        contribution: ``WindowSums -> WindowSums``: what one micro-batch adds,
            given its summed loss, gradients, sample count and normalizer.
        divisor: ``(normalizer, micro_steps, accumulation_steps) -> tensor``:
            what the window's sums are divided by.
        penalty_times: ``micro_steps -> tensor``: how many times the weight
            penalty counts in one update.
        clip_micro_batches: clip each micro-batch's mean gradient with the
            optimizer's own clipping before adding it (the optimizer clips
            the window's gradient in any case).
    """

    contribution: Callable[[WindowSums], WindowSums] = sum_contribution
    divisor: Callable = normalizer_divisor
    penalty_times: Callable = once_per_update
    clip_micro_batches: bool = False


#: The exact trainer's rule: sum everything, divide once by the window's count.
EXACT = Rule()
