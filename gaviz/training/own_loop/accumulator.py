"""Exact accumulation as a piece of anyone's loop: :class:`Accumulator`.

A micro-batch's loss is a mean over its ``count`` items; the window adds
``count * gradient`` and divides once by the total count, the gradient of
the big batch's mean (Keras's ``gradient_accumulation_steps``, optax's
``MultiSteps`` and Accelerate divide by k: the mean of means). The sums live
in replica-local variables (a ``WindowStore``), so a window spans calls.
Every decision about the window is the trainer's own (``window/``: the
tail, the cycle, the refusals); what is this module's is adding a
micro-batch to variables and deciding in cross-replica context.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gaviz.training.fit import checks
from gaviz.training.window import arithmetic, refusals
from gaviz.training.window.occurrences import scaled
from gaviz.training.window.tail import Tail
from gaviz.training.window.verdicts import ACCEPTED, NOT_DUE
from gaviz.training.window.window_cycle import WindowCycle, all_reduce, closing, reduced
from gaviz.training.window.window_store import WindowStore

#: The most sets of variables with a gradient that one traced update chooses
#: among (each is a branch holding a whole optimizer update).
MAX_GRADIENT_PATTERNS = 8


class Accumulator(tf.Module):
    """Exact gradient accumulation for your own loop or ``train_step``.

    ::

        acc = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps=4)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))   # a mean over the rows of x
        acc.step(tape.gradient(loss, model.trainable_variables), count=tf.shape(x)[0])
        ...
        acc.flush()   # at the end of an epoch: the partial window, by its own count

    Works eagerly, inside ``tf.function`` and ``strategy.run`` (one
    all-reduce per update), and in a ``train_step`` under ``Model.fit``, also
    under ``MirroredStrategy`` (where Keras's own fails, keras-team/keras#20582).
    One update is one ``optimizer.apply_gradients`` call. With a
    ``LossScaleOptimizer``, add the gradients of the scaled loss: the window
    is unscaled once, and skipped whole if it overflows.

    A variable with a None gradient in every micro-batch of a window is left
    out of its update, as Keras leaves it out of the big batch's. Inside
    ``tf.function`` an update chooses among the unions of the None patterns
    traced before it (at most ``MAX_GRADIENT_PATTERNS``).

    A window is refused (not applied, discarded) when a ``count`` was
    invalid or the total is not > 0, or, without a loss scale, when its
    gradient is not finite (:class:`gaviz.NonFiniteUpdate`): raised eagerly,
    asserted in a graph; XLA drops assertions, so a refusal in a call it
    compiled is raised by the next eager call. A sparse gradient (an
    Embedding's ``tf.IndexedSlices``) is kept as its occurrences and handed
    to the optimizer as the big batch's slices, as ``Model.fit`` hands them
    (:mod:`gaviz.training.window.occurrences`). The guide's "Accumulate in
    your own loop" says each of these at length.

    Args:
        optimizer: a Keras optimizer without ``gradient_accumulation_steps``;
            built here for ``variables`` if it is not built.
        variables: the variables the gradients are of, in the same order
            (``model.trainable_variables`` of a built model).
        accumulation_steps: micro-batches per update, an int >= 1.
        strategy: the ``tf.distribute.Strategy`` the loop runs under
            (default: the one in scope). The sums are made in its scope.

    Raises:
        TypeError, ValueError: an argument is not what is described above.

    Attributes:
        trained_variables: ``variables``, the variables each update steps.
        gradient_sums: per variable, the window's sum of ``count * gradient``
            (a variable whose gradient is sparse: an ``OccurrenceStore`` of its
            occurrences, from its first sparse gradient on).
        window_count: the window's total ``count`` (replica-local).
        micro_steps_in_window: micro-batches added since the last update.
        had_gradient: per variable, whether a micro-batch gave it a gradient.
        invalid_counts: micro-batches with an invalid ``count`` (under XLA).
        unreported_refusals: windows refused under XLA, not yet raised.
    """

    def __init__(self, optimizer, variables, accumulation_steps: int, strategy=None):
        super().__init__(name="accumulator")
        checks.check_optimizer(optimizer)
        self.trained_variables = checks.check_variables(variables)
        self.accumulation_steps = checks.check_positive_int("accumulation_steps",
                                                            accumulation_steps)
        self.strategy = checks.check_strategy(strategy, self.trained_variables,
                                              checks.VARIABLES_UNDER_STRATEGY)
        checks.check_clipping_per_window(optimizer, self.strategy)
        self.optimizer = optimizer
        # Variables given a dense gradient so far; whether an update was traced.
        self._dense_seen: set[int] = set()
        self._update_traced = False
        # Which variables had a gradient, once per kind of micro-step added so
        # far (traced or eager): what a traced update must be ready for.
        self._add_patterns: set[frozenset] = set()
        self._apply_graphs = {}  # eager apply() under a strategy: one graph per pattern
        self.tail = Tail("flush")  # due when full, or at apply() when it holds micro-batches
        # Variables left out of an update are not handed to the optimizer: their
        # None came from the caller, who knows (Keras would warn at every update).
        self.cycle = WindowCycle(optimizer, lambda: self.trained_variables,
                                 hands_left_out=False)
        self.window = WindowStore(self.strategy, "window")
        self.refusals = refusals.Unreported(self.strategy, self._context)
        with self.strategy.scope():
            if not optimizer.built:
                optimizer.build(self.trained_variables)
            self.window.build(self.trained_variables)

    # The window's variables, by the names this class has always given them.
    gradient_sums = property(lambda self: self.window.gradient_sums)
    window_count = property(lambda self: self.window.normalizer)
    micro_steps_in_window = property(lambda self: self.window.micro_steps)
    had_gradient = property(lambda self: self.window.had_gradient)
    invalid_counts = property(lambda self: self.window.invalid_counts)
    unreported_refusals = property(lambda self: self.refusals.counts)

    # ----------------------------------------------------------------- public

    def add(self, gradients, count):
        """Adds a micro-batch: ``gradients`` of its loss, a mean over ``count`` items.

        Args:
            gradients: one per variable, in ``variables``' order, as
                ``tape.gradient`` returns them (None, or ``tf.IndexedSlices``
                for an Embedding). Under a strategy, inside ``strategy.run``:
                this replica's gradients.
            count: what the micro-batch's loss divides by (on this replica):
                its rows, real tokens or weight sum; finite, > 0 (>= 0 for a
                replica's share under several replicas).

        Raises:
            ValueError: ``gradients`` do not match ``variables``, ``count``
                is not valid (eagerly), it is called in cross-replica context
                under several replicas, or a window was refused under XLA.
            gaviz.NonFiniteUpdate: a non-finite window was refused under XLA.
            tf.errors.InvalidArgumentError: ``count`` invalid, in a graph.
        """
        self._add(gradients, count, stacklevel=3)

    def apply(self):
        """One update from the window, normalized by its total count; then empty.

        An empty window updates nothing. Callable in replica context and in
        cross-replica context (eagerly, after ``strategy.run``, in a callback).

        Returns:
            Whether the window was applied, a boolean tensor (a loss-scaling
            optimizer may still skip it).

        Raises:
            ValueError, gaviz.NonFiniteUpdate: the window was refused (see the
                class) and discarded; in a graph, tf.errors.InvalidArgumentError.
        """
        self.refusals.raise_pending()
        if tf.executing_eagerly() and self.strategy.num_replicas_in_sync > 1:
            # Eagerly, a strategy runs replicas one op at a time: one graph instead.
            return self._accepted(self._apply_graph(self._eager_pattern())())
        return self._update_if(exhausted=True)

    def step(self, gradients, count):
        """:meth:`add`, then :meth:`apply` once the window holds
        ``accumulation_steps`` micro-batches (decided in the graph).

        Returns:
            Whether this call applied an update, a boolean tensor.
        """
        # Inside a tf.function, TensorFlow runs stateful ops in program order:
        # the window's count is read after this micro-batch was added.
        self._add(gradients, count, stacklevel=3)
        return self._update_if(exhausted=False)

    def flush(self):
        """Applies a partial window (an epoch's end); nothing if it is empty.

        The same as :meth:`apply`, named for where it is called.
        """
        return self.apply()

    # ------------------------------------------------------------ adding

    def _add(self, gradients, count, stacklevel):
        self.refusals.raise_pending()
        gradients = self._checked_gradients(gradients, stacklevel)
        count = refusals.checked_count(count, self.strategy.num_replicas_in_sync)
        self._add_patterns.add(frozenset(i for i, g in enumerate(gradients) if g is not None))
        if self._replica_context() is not None:
            self._replica_add(gradients, count)
        elif self.strategy.num_replicas_in_sync == 1:
            self.strategy.run(self._replica_add, args=(gradients, count))
        else:
            raise ValueError(
                f"`add` and `step` must be called in replica context under a strategy of "
                f"{self.strategy.num_replicas_in_sync} replicas: inside strategy.run, with "
                "each replica's gradients (here every replica would add the same ones). "
                "apply() and flush() may be called outside it."
            )

    def _replica_context(self):
        """This strategy's replica context; None in cross-replica context."""
        context = tf.distribute.get_replica_context()
        same = context is not None and tf.distribute.get_strategy() is self.strategy
        return context if same else None

    def _checked_gradients(self, gradients, stacklevel) -> list:
        gradients = list(gradients)
        if len(gradients) != len(self.trained_variables):
            raise ValueError(
                f"`gradients` must hold one gradient per variable ({len(self.trained_variables)}, "
                f"in the order of `variables`). Received: {len(gradients)} gradients"
            )
        for g, v in zip(gradients, self.trained_variables):
            if g is not None and not tf.TensorShape(g.shape).is_compatible_with(v.shape):
                raise ValueError(
                    f"`gradients` must have the shapes of `variables`: the gradient of "
                    f"{refusals.name(v)} has shape {g.shape}, the variable {v.shape}."
                )
        self._keep_kinds(gradients)
        return gradients

    def _keep_kinds(self, gradients) -> None:
        """A variable whose gradient arrives as ``tf.IndexedSlices`` has its
        occurrences kept (from its first such micro-batch on), as ``Model.fit``
        hands them to the optimizer; one whose gradient changes kind is refused.

        Raises:
            ValueError: a variable's gradient is sparse where it was dense in an
                earlier micro-batch, or the other way round; or the update was
                traced before a variable's first sparse gradient.
        """
        kinds = {i: isinstance(g, tf.IndexedSlices) for i, g in enumerate(gradients)
                 if g is not None}
        kept = self.window.sparse
        changed = [i for i, sparse in kinds.items()
                   if (i in kept and not sparse) or (sparse and i in self._dense_seen)]
        if changed:
            raise ValueError(
                "`gradients` must keep their kind from one micro-batch to the next: "
                f"{refusals.names([self.trained_variables[i] for i in changed])} "
                "got a dense gradient in one micro-batch and tf.IndexedSlices in another "
                "(Model.fit's one big batch would hand its optimizer one of them)."
            )
        self._dense_seen |= {i for i, sparse in kinds.items() if not sparse}
        new = {i for i, sparse in kinds.items() if sparse} - kept
        if not new:
            return
        if self._update_traced:
            raise ValueError(
                f"{refusals.names([self.trained_variables[i] for i in sorted(new)])} got "
                "sparse gradients (tf.IndexedSlices) after an update was traced in a "
                "tf.function for dense ones: add a micro-batch (add or step) before "
                "tracing apply() or flush(), so that the update is made for the window's "
                "occurrences."
            )
        self.window.keep_occurrences(self.trained_variables, new)

    def _replica_add(self, gradients, count):
        """Adds this replica's micro-batch to its own sums (no communication).

        An invalid ``count`` stops the call at the assertion; under XLA, which
        drops it, the micro-batch adds nothing and marks the window, which is
        then refused when it is due.
        """
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        valid = refusals.count_is_valid(count, replicas)
        # The raw op: tf.debugging's asserts wrap it in a cond (AssertGuard),
        # about which Grappler logs a line on every trace.
        check = tf.raw_ops.Assert(
            condition=valid,
            data=[f"`count` must be {refusals.count_expected(replicas)}: what the micro-batch's "
                  "loss divides by. Received:", count],
        )
        # Keras's losses divide a replica's loss by the number of replicas:
        # its gradient times count * replicas is the gradient of the sum.
        micro = arithmetic.of_mean(gradients, tf.where(valid, count, 0.0), self.trained_variables,
                               replicas)
        with tf.control_dependencies([check]):
            self.window.add(micro, invalid=1.0 - tf.cast(valid, tf.float32),
                            reached=tf.constant([g is not None for g in gradients]))

    # ---------------------------------------------------------- updating

    def _update_if(self, exhausted: bool):
        """Applies the window where the tail says it is due (``exhausted``:
        at ``apply``, where a partial window is), deciding in cross-replica
        context: a ``cond`` whose branch synchronizes replicas must not run in
        replica context (keras-team/keras#20582). Returns whether it was applied."""
        def decide(strategy):
            return self._accepted(self._verdict(strategy, exhausted))

        context = self._replica_context()
        if context is not None:
            # A closure, not an argument: merge_call would regroup it per replica.
            return context.merge_call(decide)
        with self.strategy.scope():
            return decide(self.strategy)

    def _accepted(self, verdict):
        """Whether the window was applied; a refusal is said (refusals.py)."""
        return tf.equal(self.refusals.say(verdict), ACCEPTED)

    def _apply_graph(self, pattern):
        """``apply``'s verdict as a graph for an eager call under a strategy,
        made for the window's own set of variables with a gradient."""
        if pattern not in self._apply_graphs:
            def verdict():
                with self.strategy.scope():
                    return self._verdict(self.strategy, True, [pattern])
            self._apply_graphs[pattern] = tf.function(verdict, autograph=False)
        return self._apply_graphs[pattern]

    def _verdict(self, strategy, exhausted: bool, patterns=None):
        """In cross-replica context: the window's verdict (``NOT_DUE`` where
        the tail says it is not due), updating from it and resetting it if due."""
        patterns = self._patterns() if patterns is None else patterns
        self._update_traced = self._update_traced or not tf.executing_eagerly()
        micro_steps = self.micro_steps_in_window.read_value()
        full = micro_steps >= self.accumulation_steps
        due = self.tail.due(full, exhausted, micro_steps)
        return tf.cond(due, lambda: self._update(strategy, patterns, full, micro_steps),
                       lambda: tf.constant(NOT_DUE))

    def _update(self, strategy, patterns, full, micro_steps):
        """The window's cycle, in cross-replica context: its checks (count,
        finite, invalid counts) all-reduced once and judged; each replica's
        share finished over the window's count and applied unless refused
        (the optimizer sums the shares); then reset."""
        count, not_finite, invalid = tf.unstack(reduced(strategy, self._replica_checks))
        chosen = self.cycle.chosen(patterns, self.had_gradient.read_value())
        verdict = self.cycle.judge(tf.constant(True), self.cycle.finite(0.0, lambda: not_finite == 0),
                                   count, invalid, foreseen=chosen < len(patterns))

        def share():
            sums = self._read_window()
            if self.cycle.loss_scaled and strategy.num_replicas_in_sync > 1:
                # The loss scale checks one replica's share: every replica
                # skips, not only those whose share overflowed.
                poison = tf.where(not_finite > 0, float("nan"), 1.0)
                sums = sums._replace(gradients=[scaled(g, poison) for g in sums.gradients])
            return self.cycle.finish(sums, micro_steps, self.accumulation_steps, count).gradients

        self.cycle.apply(tf.equal(verdict, ACCEPTED), share, patterns, chosen, per_replica=strategy)
        closing(self.tail.closes(full),
                lambda: strategy.extended.call_for_each_replica(self._replica_reset), None)
        return verdict

    def _read_window(self):
        """This replica's share of the window, its occurrences gathered."""
        return arithmetic.gathered(self.window.read(), self.trained_variables)

    def _replica_checks(self):
        """``[count, not finite, invalid counts]`` of the window, summed over replicas."""
        sums = self._read_window()
        return all_reduce(tf.stack([sums.normalizer,
                                    1.0 - tf.cast(arithmetic.all_finite(0.0, sums.gradients),
                                                  tf.float32),
                                    self.window.invalid_counts.read_value()]))

    def _replica_reset(self):
        self.window.reset(self.cycle.reset(self.window.read()))

    # ------------------------------------------------ which variables update

    def _patterns(self) -> list:
        """The sets of variables a window may give gradients to: eagerly, the
        window's own; in a graph, the cycle's unions of the micro-steps'
        patterns seen so far (fixed when it is traced)."""
        if tf.executing_eagerly():
            return [self._eager_pattern()]
        patterns = self.cycle.patterns(self._add_patterns)
        if len(patterns) > MAX_GRADIENT_PATTERNS:
            varying = frozenset().union(*self._add_patterns) - frozenset.intersection(
                *self._add_patterns)
            raise refusals.too_many_patterns([self.trained_variables[i] for i in sorted(varying)],
                                             len(patterns), MAX_GRADIENT_PATTERNS)
        return patterns

    def _eager_pattern(self) -> tuple:
        return tuple(int(i) for i in np.flatnonzero(self.had_gradient.numpy()))

    def _context(self) -> refusals.Context:
        """What a refusal's message says besides its reason."""
        seen = frozenset().union(*self._add_patterns)
        return refusals.Context(
            iterations=(int(self.optimizer.iterations.numpy()) if tf.executing_eagerly()
                        else None),
            replicas=self.strategy.num_replicas_in_sync,
            left_out=refusals.names([v for i, v in enumerate(self.trained_variables)
                                     if i not in seen]),
        )
