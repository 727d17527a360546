"""The summing window: each micro-batch's gradients added to the window's as it comes.

The window loop's first way to make a window (the second, for a loss that
couples rows, is :class:`gaviz.training.cached.cached_window.CachedWindow`):
a micro-batch runs forward and backward
(:class:`~gaviz.training.loop.forward_backward.ForwardBackward`) and adds its
summed loss and gradients to the window's sums, as the
:class:`~gaviz.training.window.rules.Rule` says (the exact rule, or a
pitfall's: a micro-batch's mean, its own clipping, an update each
micro-batch, an all-reduce each micro-batch). Between calls the sums live in
the state's :class:`~gaviz.training.window.window_store.WindowStore`.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz.training.loop.forward_backward import ForwardBackward, clip_mean_gradient, unpack
from gaviz.training.loss import sparse_gradients
from gaviz.training.window import arithmetic, rules, window_cycle
from gaviz.training.window.arithmetic import WindowSums
from gaviz.training.window.window_cycle import WindowCycle


class SummingWindow:
    """Sums each micro-batch's gradients into the window's, by the rule.

    Args:
        forward_backward: one micro-batch's forward and backward pass.
        cycle: the window's cycle (for a rule that updates each micro-batch).
        store: where a window carried into the next call lives.
        rule: the window's arithmetic.
        sparse: the variables (by index) whose gradients arrive as ``tf.IndexedSlices``.
    """

    def __init__(self, forward_backward: ForwardBackward, cycle: WindowCycle, store,
                 rule: rules.Rule = rules.EXACT, sparse=frozenset()):
        self.forward_backward, self.cycle, self.store = forward_backward, cycle, store
        self.rule, self.sparse = rule, frozenset(sparse)
        self._densified_said = False  # a sparse gradient summed densely: said once

    @property
    def carries(self) -> bool:
        """Whether a window open at a call's end is kept for the next call."""
        return self.store.built

    def start(self, variables) -> WindowSums:
        """In replica context: the sums a call starts from (a carried window's, or zeros)."""
        return self.store.read(variables, self.sparse)

    def add(self, element, sums: WindowSums, micro_sums, k) -> WindowSums:
        """In replica context: adds one micro-batch to this replica's running sums
        (no communication, unless the rule reduces each micro-batch)."""
        rule = self.rule
        micro = rule.contribution(micro_sums(*unpack(element), k))
        if not self._densified_said:
            self._densified_said = sparse_gradients.warn_where_densified(
                self.cycle.optimizer, micro.gradients, sums.gradients,
                self.forward_backward.variables(), expected=self.cycle.penalized())
        if rule.clip_micro_batches:
            micro = clip_mean_gradient(micro, self.cycle.optimizer)
        if rule.apply_each_micro_batch:
            (pattern,) = self.cycle.patterns(self.forward_backward.reach.seen())
            self.cycle.update(arithmetic.divide(micro.gradients, micro.normalizer), pattern)
        if rule.reduce_each_micro_batch:
            micro = window_cycle.all_reduce(micro)
        # Add once the whole backward pass is done. Added as each gradient
        # arrives, a new sum would be allocated while the micro-batch's
        # activations are still alive, raising the peak by the largest weight.
        with tf.control_dependencies(micro.gradients), tf.name_scope("add_to_sums"):
            return arithmetic.add(sums, micro)

    def finished(self, sums: WindowSums, variables) -> WindowSums:
        """In replica context: the window's sums, its occurrences gathered."""
        return arithmetic.gathered(sums, variables)

    def fresh(self, sums: WindowSums) -> WindowSums:
        """In replica context: what the window after ``sums`` starts from."""
        return self.cycle.reset(sums)

    def keep(self, sums: WindowSums) -> None:
        """In replica context: keeps an open window's sums for the next call."""
        self.store.write(sums)

    def sparse_gradients(self, element, strategy) -> frozenset:
        """The variables whose gradient a micro-step gives as ``tf.IndexedSlices``."""
        return self.forward_backward.sparse(element, strategy)
