"""How a window's arithmetic is done, as data: the exact rule and its variations.

A :class:`Rule` is a frozen set of pure functions and switches the window
loop reads: what one micro-batch contributes to the window, what the window
is divided by, how many times the weight penalty counts in an update,
whether each micro-batch's gradient is clipped (with the optimizer's own
clipping) before it is added or applied on its own, whether it is summed
across replicas as it comes, what the next window starts from, and how
often the optimizer's moving average of the weights moves per update.
:data:`EXACT` is the rule of the exact trainer; the arithmetic pitfalls in
:mod:`gaviz.gallery.pitfalls` are the exact trainer with another rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import tensorflow as tf

from gaviz.training.window.arithmetic import WindowSums


def sum_contribution(micro: WindowSums) -> WindowSums:
    """Exact: a micro-batch adds its summed loss, gradient and its own sample count."""
    return micro


def normalizer_divisor(normalizer, micro_steps, accumulation_steps):
    """Exact: the window is divided by its sample count (or total weight)."""
    del micro_steps, accumulation_steps  # the count already says how full it was
    return normalizer


def fresh_window(sums, zeros, variables):
    """Exact: the window after a closed one starts from zeros."""
    del sums, variables
    return zeros


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
        apply_each_micro_batch: also step the optimizer with each
            micro-batch's own mean gradient, as it arrives.
        reduce_each_micro_batch: sum each micro-batch across replicas as it
            comes (PyTorch DDP's behaviour without ``no_sync()``), not the
            window once.
        reset: ``(sums, zeros, variables) -> WindowSums``: what the window
            after a closed one starts from, given the closed window's sums,
            zeros like them and the model's trainable variables; run in
            replica context, inside the graph.
        carries_sums: whether ``reset`` may start from anything but zeros,
            so that the sums are carried in variables between graph calls.
        schedule_step: ``micro_steps -> step``: the step a learning-rate
            schedule reads at an update, given the micro-batches consumed up
            to the end of its window; None (exact): the optimizer's own
            count of updates, ``optimizer.iterations``.
        caches_coupled_loss: whether a loss whose rows couple (or that is not
            one value per row) trains with the cached window
            (``gaviz.training.cached``: the loss once on the window's
            outputs, exact); False: summed micro-batch by micro-batch, each
            row meeting only its own micro-batch's rows.
        ema_updates_before_apply: ``micro_steps -> count``: how many times the
            optimizer's moving average of the weights (``use_ema=True``) moves
            towards the weights just before an update, given the window's
            micro-steps (carried ones included); each move is Keras's own,
            momentum 0 while ``optimizer.iterations == 0``. None (exact): only
            the optimizer's own move, once per update, after it.
    """

    contribution: Callable[[WindowSums], WindowSums] = sum_contribution
    divisor: Callable = normalizer_divisor
    penalty_times: Callable = once_per_update
    clip_micro_batches: bool = False
    apply_each_micro_batch: bool = False
    reduce_each_micro_batch: bool = False
    reset: Callable = fresh_window
    carries_sums: bool = False
    schedule_step: Callable | None = None
    ema_updates_before_apply: Callable | None = None
    caches_coupled_loss: bool = True


#: The exact trainer's rule: sum everything, divide once by the window's count.
EXACT = Rule()
