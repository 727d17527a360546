"""Exact accumulation as a piece of anyone's loop: :class:`Accumulator`.

A micro-batch's loss is a mean over its ``count`` items (rows, real tokens,
a weight sum). Weighing its gradient by ``count`` gives the gradient of its
summed loss; the window adds those up and divides once by its total count::

    g = sum_window(count_j * grad(mean_j)) / sum_window(count_j)

which is the gradient of the big batch's mean, ragged micro-batches and a
partial window included, and counts a term that does not depend on the batch
(a weight penalty in the loss) exactly once. Dividing by k instead (Keras's
``gradient_accumulation_steps``, optax's ``MultiSteps``, Accelerate) is the
mean of micro-batch means.

The sums live in ``tf.Variable``s (replica-local under a strategy, a
:class:`~gaviz.training.window_cycle.WindowStore`), so a window may span
``tf.function`` calls, ``strategy.run`` calls and ``Model.fit``'s steps,
and is saved in a checkpoint. The rest of a window's life (the reduction
across replicas, the divisor, the checks, the update and its skip under a
loss scale, the reset) is the trainer's own
(:class:`~gaviz.training.window_cycle.WindowCycle`); only how a refused window
is said is this module's.

As the big batch's update would, an update leaves out a variable that had no
gradient (None) in the whole window, and a window is refused (discarded, not
applied) when a ``count`` is invalid or its gradient is not finite, the
trainer's policy (:class:`gaviz.NonFiniteUpdate`). XLA drops assertions, so
these are decided with data flow, and a refusal inside a call compiled by XLA
is recorded and raised by the next call made outside XLA.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gaviz.training import checks, optimizers, sparse_gradients, window
from gaviz.training.history import NonFiniteUpdate
from gaviz.training.window_cycle import (
    APPLIED,
    BAD_COUNT,
    NOT_DUE,
    NOT_FINITE,
    REFUSALS,
    WindowCycle,
    WindowStore,
    all_reduce,
    reduced,
)

#: The most sets of variables with a gradient that one traced update chooses
#: among (each is a branch holding a whole optimizer step).
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

    Works eagerly and inside ``tf.function`` (``step`` decides in the graph:
    nothing retraces per window), inside ``strategy.run`` (micro-steps add to
    each replica's own sums with no communication; an update all-reduces the
    window's count once, and the optimizer its gradient once), and in a
    model's ``train_step`` under ``Model.fit``, also under
    ``MirroredStrategy``, where Keras's own ``gradient_accumulation_steps``
    fails (keras-team/keras#20582): the decision to update is taken in
    cross-replica context, as Keras's ``LossScaleOptimizer`` takes its own.

    One update is one ``optimizer.apply_gradients`` call, so the optimizer's
    clipping, weight decay, EMA and loss scale act once per update and
    ``optimizer.iterations`` counts updates (learning-rate schedules read
    it). With a ``keras.optimizers.LossScaleOptimizer``, add the gradients of
    the scaled loss (``optimizer.scale_loss(loss)``, as Keras's
    ``train_step`` does): the window is unscaled once, and a window whose
    gradient is not finite is skipped whole and the scale lowered, as the big
    batch's would be.

    A variable whose gradient is None in every micro-batch of a window is
    left out of that update, as Keras's optimizer leaves it out of the big
    batch's (its momentum does not move it, weight decay does not shrink it);
    one with a gradient in any micro-batch is updated with the window's
    gradient. Inside ``tf.function`` the variables handed to the optimizer
    are fixed when it is traced: an update traced after micro-steps with
    different None patterns chooses among their unions (at most
    ``MAX_GRADIENT_PATTERNS``), and one that meets a window it was not
    traced for refuses it (see :meth:`apply`).

    A window is refused, not applied and discarded (the model and optimizer
    keep the last update), when a micro-batch's ``count`` was invalid or the
    window's total ``count`` is not > 0, or, without a loss scale, when its
    gradient is not finite (:class:`gaviz.NonFiniteUpdate`, as the trainer).
    Eagerly it raises at once; in a graph an assertion raises after the
    window was discarded. XLA drops assertions: a window refused in a call
    compiled by XLA (``jit_compile=True``) is counted in
    ``unreported_refusals`` and raised by the next call made outside XLA
    (an eager ``add``, ``step``, ``apply`` or ``flush``, or
    :class:`FlushAtEpochEnd`).

    Sparse gradients (an ``Embedding``'s ``tf.IndexedSlices``) are summed
    into a dense sum (a dense copy of the table, like every other sum):
    the update is the textbook one on the window's summed gradient. Keras's
    ``Model.fit`` applies their occurrences one by one, which differs for an
    optimizer that is not linear in the gradient; a warning says so once
    (:mod:`gaviz.training.sparse_gradients`).

    Args:
        optimizer: a Keras optimizer without ``gradient_accumulation_steps``;
            built here for ``variables`` if it is not built.
        variables: the variables the gradients are of, in the same order
            (``model.trainable_variables`` of a built model).
        accumulation_steps: micro-batches per update (``step`` applies the
            window once it holds that many), an int >= 1.
        strategy: the ``tf.distribute.Strategy`` the loop runs under
            (default: the one in scope). The sums are made in its scope.

    Raises:
        TypeError, ValueError: an argument is not what is described above.

    Attributes:
        trained_variables: ``variables``, the variables each update steps.
        gradient_sums: per variable, the window's sum of ``count * gradient``
            (replica-local under a strategy; float32, float64 for float64
            variables).
        window_count: the window's total ``count`` (replica-local).
        micro_steps_in_window: micro-batches added since the last update.
        had_gradient: per variable, whether a micro-batch of the window gave
            it a gradient (not None): the variables its update steps.
        invalid_counts: micro-batches of the window whose ``count`` was
            invalid (added under XLA, which drops the check; replica-local).
        unreported_refusals: windows refused inside calls compiled by XLA and
            not yet raised, per reason (``count``, not finite, gradients).
    """

    def __init__(self, optimizer, variables, accumulation_steps: int, strategy=None):
        super().__init__(name="accumulator")
        checks.check_optimizer(optimizer)
        self.trained_variables = _checked_variables(variables)
        self.accumulation_steps = checks.check_positive_int(
            "accumulation_steps", accumulation_steps
        )
        self.strategy = _checked_strategy(strategy, self.trained_variables)
        _check_clipping(optimizer, self.strategy)
        self.optimizer = optimizer
        self._sparse_said = False
        # Which variables had a gradient, once per kind of micro-step added so
        # far (traced or eager): what a traced update must be ready for.
        self._add_patterns: set[frozenset] = set()
        self._apply_graphs = {}  # eager apply() under a strategy: one graph per pattern
        self._graph_traced = False  # a graph may have counted unreported refusals
        # Variables left out of an update are not handed to the optimizer: their
        # None came from the caller, who knows (Keras would warn at every update).
        self.cycle = WindowCycle(optimizer, lambda: self.trained_variables,
                                 hands_left_out=False)
        self.window = WindowStore(self.strategy, "window")
        with self.strategy.scope():
            if not optimizer.built:
                optimizer.build(self.trained_variables)
            self.window.build(self.trained_variables)
            self.unreported_refusals = tf.Variable(
                tf.zeros([len(REFUSALS)], tf.int64), trainable=False,
                name="unreported_refusals")

    # The window's variables, by the names this class has always given them.
    gradient_sums = property(lambda self: self.window.gradient_sums)
    window_count = property(lambda self: self.window.normalizer)
    micro_steps_in_window = property(lambda self: self.window.micro_steps)
    had_gradient = property(lambda self: self.window.had_gradient)
    invalid_counts = property(lambda self: self.window.invalid_counts)

    # ----------------------------------------------------------------- public

    def add(self, gradients, count):
        """Adds a micro-batch: ``gradients`` of its loss, a mean over ``count`` items.

        Args:
            gradients: one per variable, in ``variables``' order, as
                ``tape.gradient`` returns them (None for a variable the loss
                does not reach; ``tf.IndexedSlices`` for an Embedding). Under
                a strategy, call it in replica context (inside
                ``strategy.run``) with this replica's gradients, of the loss
                you would hand ``optimizer.apply_gradients`` there: Keras's
                losses already divide it by the number of replicas, as
                ``tf.nn.compute_average_loss`` does.
            count: what the micro-batch's loss divides by (on this replica):
                its rows for a Keras mean loss, its real tokens for a masked
                or token-level loss, its weight sum for a weighted mean. A
                finite scalar > 0 (>= 0 in replica context under several
                replicas, where a replica's share of a short micro-batch may
                be empty).

        Raises:
            ValueError: ``gradients`` do not match ``variables`` (length or
                shapes), ``count`` is not a scalar or (eagerly) not > 0, it is
                called in cross-replica context under a strategy of several
                replicas, or a window was refused under XLA since the last
                eager call (see the class).
            gaviz.NonFiniteUpdate: a non-finite window was refused under XLA
                since the last eager call.
            tf.errors.InvalidArgumentError: ``count`` <= 0 (in a graph);
                nothing was added. Under XLA nothing is raised: the window is
                refused when it is due.
        """
        self._add(gradients, count, stacklevel=3)

    def _add(self, gradients, count, stacklevel):
        self._raise_unreported()
        gradients = self._checked_gradients(gradients, stacklevel)
        count = _checked_count(count, self.strategy.num_replicas_in_sync)
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

    def apply(self):
        """One update from the window, normalized by its total count; then empty.

        An empty window updates nothing (an update from no data would still
        move weights through an optimizer's momentum). Callable in replica
        context (inside ``strategy.run``, a ``train_step``) and in
        cross-replica context (after ``strategy.run``, eagerly, in a callback).

        Eagerly, the update steps exactly the variables that had a gradient in
        the window. Inside ``tf.function`` it chooses among the sets of
        variables the micro-steps traced before it gave gradients to; a
        window whose set is not among them (a micro-step with another None
        pattern was traced after this update) is refused: call ``apply`` or
        ``flush`` outside ``tf.function`` in such a loop.

        Returns:
            Whether the window held micro-batches and was applied, a boolean
            tensor (a loss-scaling optimizer may still skip a non-finite
            window; its ``iterations`` does not count that one).

        Raises:
            ValueError: (eagerly) the window held a micro-batch whose
                ``count`` was invalid (added under XLA), or its total
                ``count`` is not > 0; it was discarded.
            gaviz.NonFiniteUpdate: (eagerly) the window's gradient is not
                finite (and the optimizer has no loss scale); it was
                discarded.
            tf.errors.InvalidArgumentError: the same, in a graph, after the
                window was discarded; or a window this traced update cannot
                apply exactly.
        """
        self._raise_unreported()
        if tf.executing_eagerly() and self.strategy.num_replicas_in_sync > 1:
            # Eagerly, a strategy runs replicas one op at a time: one graph instead.
            return self._report(self._apply_graph(self._eager_pattern())())
        return self._update_if(self._holds_micro_batches)

    def step(self, gradients, count):
        """:meth:`add`, then :meth:`apply` once the window holds
        ``accumulation_steps`` micro-batches (decided in the graph).

        Returns:
            Whether this call applied an update, a boolean tensor.
        """
        # Inside a tf.function, TensorFlow runs stateful ops in program order:
        # the window's count is read after this micro-batch was added.
        self._add(gradients, count, stacklevel=3)
        return self._update_if(
            lambda: self.micro_steps_in_window.read_value() >= self.accumulation_steps
        )

    def flush(self):
        """Applies a partial window (an epoch's end); nothing if it is empty.

        The same as :meth:`apply`, named for where it is called.
        """
        return self.apply()

    # ------------------------------------------------------------ adding

    def _replica_context(self):
        """The replica context of this accumulator's strategy, or None when
        the caller is in cross-replica context (or outside its strategy)."""
        context = tf.distribute.get_replica_context()
        if context is None or tf.distribute.get_strategy() is not self.strategy:
            return None
        return context

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
                    f"{_name(v)} has shape {g.shape}, the variable {v.shape}."
                )
        self._say_sparse(gradients, stacklevel + 1)
        return gradients

    def _say_sparse(self, gradients, stacklevel):
        if not self._sparse_said:
            self._sparse_said = True
            sparse_gradients.warn_if_fit_differs(self.optimizer, gradients, self.trained_variables,
                                                 stacklevel=stacklevel + 1)

    def _replica_add(self, gradients, count):
        """Adds this replica's micro-batch to its own sums (no communication).

        An invalid ``count`` stops the call at the assertion; under XLA, which
        drops it, the micro-batch adds nothing and marks the window, which is
        then refused when it is due.
        """
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        valid = tf.logical_and(tf.math.is_finite(count), count > 0 if replicas == 1 else count >= 0)
        # The raw op: tf.debugging's asserts wrap it in a cond (AssertGuard),
        # about which Grappler logs a line on every trace.
        check = tf.raw_ops.Assert(
            condition=valid,
            data=[f"`count` must be {_count_expected(replicas)}: what the micro-batch's loss "
                  "divides by. Received:", count],
        )
        count = tf.where(valid, count, 0.0)
        # Keras's losses divide a replica's loss by the number of replicas:
        # count * replicas brings its gradient back to the gradient of the sum.
        micro = window.of_mean(gradients, count * float(replicas), self.trained_variables)
        micro = micro._replace(sample_count=count, normalizer=count)
        with tf.control_dependencies([check]):
            self.window.add(micro, invalid=1.0 - tf.cast(valid, tf.float32),
                            reached=tf.constant([g is not None for g in gradients]))

    # ---------------------------------------------------------- updating

    def _holds_micro_batches(self):
        return self.micro_steps_in_window.read_value() > 0

    def _update_if(self, is_due):
        """Applies the window where ``is_due()`` (a boolean tensor), deciding
        in cross-replica context: a ``cond`` whose branch synchronizes
        replicas must not run in replica context (keras-team/keras#20582).
        Returns whether it was applied."""
        context = self._replica_context()
        if context is not None:
            # A closure, not an argument: merge_call would regroup it per replica.
            return context.merge_call(
                lambda strategy: self._report(self._verdict_if(strategy, is_due))
            )
        with self.strategy.scope():
            return self._report(self._verdict_if(self.strategy, is_due))

    def _apply_graph(self, pattern):
        """``apply``'s verdict as a graph for an eager call under a strategy,
        made for the window's own set of variables with a gradient."""
        if pattern not in self._apply_graphs:
            def verdict():
                with self.strategy.scope():
                    return self._verdict_if(self.strategy, self._holds_micro_batches, [pattern])
            self._apply_graphs[pattern] = tf.function(verdict, autograph=False)
        return self._apply_graphs[pattern]

    def _verdict_if(self, strategy, is_due, patterns=None):
        """In cross-replica context: the window's verdict (``NOT_DUE`` where
        ``is_due()`` does not hold), updating from it and emptying it if due."""
        patterns = self._patterns() if patterns is None else patterns
        return tf.cond(is_due(), lambda: self._update(strategy, patterns),
                       lambda: tf.constant(NOT_DUE))

    def _update(self, strategy, patterns):
        """The window's cycle, in cross-replica context: its checks (count,
        finite, invalid counts) all-reduced once and judged; each replica's
        share finished over the window's count and applied unless refused
        (the variables of the pattern that had a gradient; the optimizer sums
        the shares); then emptied."""
        count, not_finite, invalid = tf.unstack(reduced(strategy, self._replica_checks))
        chosen = self._chosen_pattern(patterns)
        finite = tf.constant(True) if self.cycle.loss_scaled else not_finite == 0
        verdict = self.cycle.judge(tf.constant(True), finite, count, invalid,
                                   foreseen=chosen < len(patterns))
        steps = self.micro_steps_in_window.read_value()

        def share():
            sums = self.window.read()
            if self.cycle.loss_scaled and strategy.num_replicas_in_sync > 1:
                # The loss scale checks one replica's share: every replica
                # skips, not only those whose share overflowed.
                sums = sums._replace(gradients=[tf.where(not_finite > 0, g * float("nan"), g)
                                                for g in sums.gradients])
            return self.cycle.finish(sums, steps, self.accumulation_steps, count).gradients

        self.cycle.apply(tf.equal(verdict, APPLIED), share, patterns, chosen, per_replica=strategy)
        strategy.extended.call_for_each_replica(self._replica_empty)
        return verdict

    def _replica_checks(self):
        """``[count, not finite, invalid counts]`` of the window, summed over replicas."""
        sums = self.window.read()
        return all_reduce(tf.stack([sums.normalizer,
                                    1.0 - tf.cast(window.all_finite(0.0, sums.gradients),
                                                  tf.float32),
                                    self.window.invalid_counts.read_value()]))

    def _replica_empty(self):
        self.window.restart(self.cycle.empty(self.window.read()))

    def _chosen_pattern(self, patterns):
        """The index in ``patterns`` of the window's variables with a gradient,
        or ``len(patterns)`` when it is none of them."""
        flags = self.had_gradient.read_value()  # every replica added the same pattern
        table = tf.constant([[i in p for i in range(len(self.trained_variables))]
                             for p in patterns], tf.bool)
        matches = tf.reduce_all(tf.equal(table, flags[tf.newaxis]), axis=1)
        first = tf.argmax(tf.cast(matches, tf.int32), output_type=tf.int32)
        return tf.where(tf.reduce_any(matches), first, len(patterns))

    # ------------------------------------------------ which variables update

    def _patterns(self) -> list:
        """The sets of variables (sorted index tuples) a window may give
        gradients to: eagerly, the window's own; in a graph, every union of
        the micro-steps' patterns seen so far (fixed when it is traced)."""
        if tf.executing_eagerly():
            return [self._eager_pattern()]
        seen = self._add_patterns or {frozenset(range(len(self.trained_variables)))}
        unions = set()
        for pattern in seen:
            unions |= {pattern} | {pattern | other for other in unions}
        if len(unions) > MAX_GRADIENT_PATTERNS:
            raise ValueError(self._too_many_patterns(seen, len(unions)))
        return sorted(tuple(sorted(p)) for p in unions)

    def _eager_pattern(self) -> tuple:
        return tuple(int(i) for i in np.flatnonzero(self.had_gradient.numpy()))

    def _too_many_patterns(self, seen, unions: int) -> str:
        return (
            f"`gradients` are None for different variables in different micro-steps "
            f"({_names(self._varying(seen))}): a window of them may give gradients to any "
            f"of {unions} sets of variables, more than the {MAX_GRADIENT_PATTERNS} a "
            "tf.function's update is traced for. Call apply() or flush() outside "
            "tf.function (it reads which variables had a gradient), or give these "
            "variables zeros (tf.zeros_like) where their gradient is None if they should "
            "be updated in every window."
        )

    def _varying(self, seen) -> list:
        """The variables with a gradient in some micro-steps and None in others."""
        varying = frozenset().union(*seen) - frozenset.intersection(*seen)
        return [self.trained_variables[i] for i in sorted(varying)]

    # --------------------------------------------------------- refusals

    def _report(self, verdict):
        """Whether the window was applied, from its verdict; a refused window
        is said: raised eagerly, asserted in a graph. An assertion that XLA
        dropped lets the count in ``unreported_refusals`` run, for the next
        eager call to raise."""
        if tf.executing_eagerly():
            code = int(verdict)
            if code in REFUSALS:
                raise self._refusal(code, windows=1, compiled=False)
            return tf.constant(code == APPLIED)
        self._graph_traced = True
        checks = [tf.raw_ops.Assert(condition=tf.not_equal(verdict, code),
                                    data=[str(self._refusal(code, windows=1, compiled=False))])
                  for code in REFUSALS]
        with tf.control_dependencies(checks):
            # Runs only where no assertion stopped the call: under XLA. The
            # verdicts that are not refusals index nothing (a row of zeros).
            self.unreported_refusals.assign_add(
                tf.one_hot(verdict - 1, len(REFUSALS), dtype=tf.int64))
        return tf.equal(verdict, APPLIED)

    def _raise_unreported(self):
        """Eagerly, raises what calls compiled by XLA refused since the last
        eager call (once)."""
        if not (self._graph_traced and tf.executing_eagerly()):
            return
        counted = self.unreported_refusals.numpy()
        if counted.any():  # one reason per call, each said once
            index = int(np.flatnonzero(counted)[0])
            self.unreported_refusals.assign(tf.where(tf.range(len(REFUSALS)) == index,
                                                     tf.constant(0, tf.int64), counted))
            raise self._refusal(REFUSALS[index], windows=int(counted[index]), compiled=True)

    def _refusal(self, code, windows: int, compiled: bool) -> Exception:
        """The error that says a window (or ``windows``) was refused for ``code``."""
        where = ("in calls compiled by XLA (jit_compile=True), which drops assertions, "
                 if compiled else "")
        refused = f"{windows} window{'s' if windows > 1 else ''} {where}"
        if code == NOT_FINITE:
            return NonFiniteWindow(int(self.optimizer.iterations.numpy())
                                   if tf.executing_eagerly() else None, refused)
        if code == BAD_COUNT:
            return ValueError(
                f"`count` must be {_count_expected(self.strategy.num_replicas_in_sync)} for "
                "every micro-batch, and a window's total count > 0: what the micro-batches' "
                f"losses divide by. {refused}broke this: not applied, and discarded (the "
                "model and optimizer keep the update before it)."
            )
        return ValueError(
            f"{refused}gave gradients (not None) to a set of variables that this "
            "tf.function's update was not traced for: it chooses which variables had a "
            "gradient among the micro-steps traced before it, and a micro-step with another "
            "pattern was traced after it. The window was not applied, and discarded. "
            f"Variables it leaves out: {_names(self._left_out())}. Call apply() or flush() "
            "outside tf.function (it reads which variables had a gradient), or give the "
            "variables zeros (tf.zeros_like) where their gradient is None if they should be "
            "updated in every window."
        )

    def _left_out(self) -> list:
        """The variables no micro-step seen so far gave a gradient."""
        seen = frozenset().union(*self._add_patterns)
        return [v for i, v in enumerate(self.trained_variables) if i not in seen]


class NonFiniteWindow(NonFiniteUpdate):
    """:class:`gaviz.NonFiniteUpdate` as an :class:`Accumulator` raises it: a
    window's gradient was not finite, so it was not applied and was discarded.
    An accumulator knows no epoch and no loss (``epoch`` is None, ``loss``
    nan); ``update`` is ``iterations + 1``.

    Args:
        iterations: ``optimizer.iterations`` when it was refused (None in a
            graph, where the message is an assertion's).
        refused: which windows, as the message says it ("1 window ").
    """

    def __init__(self, iterations, refused: str = "1 window "):
        self.iterations, self.refused = iterations, refused
        self.update = None if iterations is None else iterations + 1
        self.epoch, self.loss = None, float("nan")
        kept = "" if iterations is None else f" (optimizer.iterations={iterations})"
        FloatingPointError.__init__(
            self,
            f"The gradient of {refused}is not finite (nan or inf): not applied, and "
            f"discarded; the model and optimizer keep the update before it{kept}, as "
            "gaviz.NonFiniteUpdate says of the trainer's windows. Lower the learning rate "
            "or check the data.",
        )

    def __reduce__(self):
        return type(self), (self.iterations, self.refused)


class FlushAtEpochEnd(keras.callbacks.Callback):
    """A Keras callback: applies each accumulator's partial window right after
    the last training batch of every epoch of ``Model.fit``, as the big
    batch's last, smaller batch is applied: before validation and before any
    callback's ``on_epoch_end``, wherever this one is listed, so that
    ``EarlyStopping(restore_best_weights=True)`` and ``ModelCheckpoint`` keep
    the epoch's weights.

    The last batch is the one at ``params["steps"]``, which Keras knows for
    arrays, a dataset of known cardinality, a ``PyDataset`` and
    ``steps_per_epoch`` (with ``steps_per_execution`` > 1 the last call
    reports an index at or past it). Where Keras does not know an epoch's
    length (a dataset of unknown cardinality, a generator), the first epoch's
    window is applied at ``on_test_begin`` or ``on_epoch_end``, in list order,
    and later epochs take the first's length; an epoch longer than the first
    is refused (its window would be split). There, list this callback before
    the ones that read the weights, or give ``fit`` the length.

    It acts after each batch, so Keras runs batch-end callbacks in step with
    training, as it does for ``ModelCheckpoint``.

    Args:
        *accumulators: the :class:`Accumulator` s a model's ``train_step`` steps.
    """

    def __init__(self, *accumulators: Accumulator):
        super().__init__()
        for accumulator in accumulators:
            if not isinstance(accumulator, Accumulator):
                raise TypeError(
                    "`accumulators` must be gaviz.Accumulator instances. "
                    f"Received: {accumulator!r} of type {type(accumulator).__name__}"
                )
        if not accumulators:
            raise ValueError("`accumulators` must name at least one gaviz.Accumulator.")
        self.accumulators = accumulators
        self._training = False
        self._first_epoch_steps = None  # learned where Keras does not know an epoch's length
        self._steps_seen = 0  # this epoch's batches, as Keras's batch index reports them

    def _flush(self):
        for accumulator in self.accumulators:
            accumulator.flush()

    def _keras_steps(self):
        return (self.params or {}).get("steps")

    def on_train_begin(self, logs=None):
        self._training, self._first_epoch_steps = True, None

    def on_train_end(self, logs=None):
        self._training = False

    def on_epoch_begin(self, epoch, logs=None):
        self._steps_seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps_seen = batch + 1
        steps = self._keras_steps() or self._first_epoch_steps
        if steps is None:
            return
        if self._keras_steps() is None and self._steps_seen > steps:
            raise ValueError(
                f"FlushAtEpochEnd applied this epoch's partial window after batch {steps}, "
                "the first epoch's length (Keras does not know the data's length), but this "
                "epoch has more batches than that: its window was split. Give Model.fit the "
                "epoch's length: steps_per_epoch, or a dataset of known cardinality "
                "(dataset.apply(tf.data.experimental.assert_cardinality(batches)))."
            )
        if self._steps_seen >= steps:
            self._flush()

    def on_test_begin(self, logs=None):
        # Model.fit validates after the epoch's last step and before
        # on_epoch_end: where the last step was not known, the partial
        # window still belongs to the epoch validated.
        if self._training:
            self._flush()

    def on_epoch_end(self, epoch, logs=None):
        self._flush()
        if self._keras_steps() is None and self._first_epoch_steps is None:
            self._first_epoch_steps = self._steps_seen


def _checked_variables(variables) -> list:
    variables = list(variables) if variables is not None else []
    if not variables:
        raise ValueError(
            "`variables` must list the variables the gradients are of "
            "(model.trainable_variables of a built model). Received: no variables; "
            "build the model first (model.build(input_shape), or call it on a batch)."
        )
    for v in variables:
        if not isinstance(v, (tf.Variable, keras.Variable)):
            raise TypeError(
                f"`variables` must hold tf.Variable or keras.Variable objects. "
                f"Received: {v!r} of type {type(v).__name__}"
            )
    return variables


def _checked_strategy(strategy, variables):
    if strategy is None:
        strategy = tf.distribute.get_strategy()
    elif not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            f"`strategy` must be a tf.distribute.Strategy. Received: strategy={strategy!r}"
        )
    # A keras.Variable holds its tf.Variable in .value (a tf.Variable's .value is a method).
    inner = variables[0].value if isinstance(variables[0], keras.Variable) else variables[0]
    if not strategy.extended.variable_created_in_scope(inner):
        raise ValueError(
            "`variables` were created under another strategy than this accumulator's "
            f"({type(strategy).__name__}): create the Accumulator inside the "
            "strategy.scope() the model was built in, or pass strategy=."
        )
    return strategy


def _checked_count(count, replicas: int):
    count = tf.cast(tf.convert_to_tensor(count), tf.float32)
    if count.shape.rank not in (None, 0):
        raise ValueError(
            f"`count` must be a scalar: what the micro-batch's loss divides by. "
            f"Received: a tensor of shape {count.shape}"
        )
    if tf.executing_eagerly() and not (np.isfinite(float(count)) and (
            float(count) > 0 or replicas > 1 and float(count) == 0)):
        raise ValueError(
            f"`count` must be {_count_expected(replicas)}: what the micro-batch's loss "
            f"divides by (its rows, real tokens or weight sum). Received: count={float(count)}"
        )
    return count


def _count_expected(replicas: int) -> str:
    """A replica's share of a global micro-batch may be empty; a micro-batch may not."""
    return "> 0 and finite" if replicas == 1 else ">= 0 and finite (0: this replica's share is empty)"


def _check_clipping(optimizer, strategy):
    """Keras clips each replica's share of a gradient before it sums them
    across replicas: not the window's gradient. Refused rather than changed."""
    clipping = optimizers.clipping(optimizer)
    if clipping and strategy.num_replicas_in_sync > 1:
        raise ValueError(
            f"`optimizer` clips gradients ({', '.join(clipping)}) under a strategy of "
            f"{strategy.num_replicas_in_sync} replicas: Keras clips each replica's share "
            "of the gradient before summing them, not the window's gradient, so the update "
            "would not be the big batch's. Clip in one replica's loop, or use "
            "gaviz.AccumulationTrainer, which clips the window's gradient."
        )


def _name(variable) -> str:
    return getattr(variable, "path", None) or variable.name


def _names(variables, shown: int = 6) -> str:
    """Variables' names for a message: the first ``shown``, then how many more."""
    names = [_name(v) for v in variables[:shown]]
    if len(variables) > shown:
        names.append(f"and {len(variables) - shown} more")
    return ", ".join(names) or "none"
