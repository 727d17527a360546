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

The sums live in ``tf.Variable``s (replica-local under a strategy), so a
window may span ``tf.function`` calls, ``strategy.run`` calls and
``Model.fit``'s steps, and is saved in a checkpoint. The arithmetic is
:mod:`gaviz.training.window`'s, as in the trainer.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from gaviz.training import checks, sparse_gradients, window
from gaviz.training.window_update import apply_to, when


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
        self._apply_graph = None  # apply() as a tf.function, for eager calls under a strategy
        with self.strategy.scope():
            if not optimizer.built:
                optimizer.build(self.trained_variables)
            self.gradient_sums = [
                _replica_local(tf.zeros(v.shape, window.accumulator_dtype(v)), _sum_name(v))
                for v in self.trained_variables
            ]
            self.window_count = _replica_local(0.0, "window_count")
            self.micro_steps_in_window = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="micro_steps_in_window",
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

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
                scalar > 0 (>= 0 in replica context under several replicas,
                where a replica's share of a short micro-batch may be empty).

        Raises:
            ValueError: ``gradients`` do not match ``variables`` (length or
                shapes), ``count`` is not a scalar, or it is called in
                cross-replica context under a strategy of several replicas.
            tf.errors.InvalidArgumentError: ``count`` <= 0 (in a graph);
                nothing was added.
        """
        self._add(gradients, count, stacklevel=3)

    def _add(self, gradients, count, stacklevel):
        gradients = self._checked_gradients(gradients, stacklevel)
        count = _checked_count(count, self.strategy.num_replicas_in_sync)
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

        Returns:
            Whether the window held micro-batches and was applied, a boolean
            tensor (a loss-scaling optimizer may still skip a non-finite
            window; its ``iterations`` does not count that one).
        """
        if tf.executing_eagerly() and self.strategy.num_replicas_in_sync > 1:
            # Eagerly, a strategy runs replicas one op at a time: one graph instead.
            if self._apply_graph is None:
                self._apply_graph = tf.function(self._apply_if_not_empty, autograph=False)
            return self._apply_graph()
        return self._apply_if_not_empty()

    def _apply_if_not_empty(self):
        return self._update_if(lambda: self.micro_steps_in_window.read_value() > 0)

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

    # ---------------------------------------------------------------- private

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
                    f"{v.path if hasattr(v, 'path') else v.name} has shape {g.shape}, "
                    f"the variable {v.shape}."
                )
        self._say_sparse(gradients, stacklevel + 1)
        return gradients

    def _say_sparse(self, gradients, stacklevel):
        if not self._sparse_said:
            self._sparse_said = True
            sparse_gradients.warn_if_fit_differs(self.optimizer, gradients, self.trained_variables,
                                                 stacklevel=stacklevel + 1)

    def _replica_add(self, gradients, count):
        """Adds this replica's micro-batch to its own sums (no communication)."""
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        # Keras's losses divide a replica's loss by the number of replicas:
        # count * replicas brings its gradient back to the gradient of the sum.
        micro = window.of_mean(gradients, count * float(replicas), self.trained_variables)
        micro = micro._replace(sample_count=count, normalizer=count)
        # The raw op: tf.debugging's asserts wrap it in a cond (AssertGuard),
        # about which Grappler logs a line on every trace.
        check = tf.raw_ops.Assert(
            condition=count > 0 if replicas == 1 else count >= 0,
            data=[f"`count` must be {_count_expected(replicas)}: what the micro-batch's loss "
                  "divides by. Received:", count],
        )
        with tf.control_dependencies([check]):
            total = window.add(self._window_sums(), micro)
            for variable, value in zip(self.gradient_sums, total.gradients):
                variable.assign(value)
            self.window_count.assign(total.normalizer)
            self.micro_steps_in_window.assign_add(1)

    def _window_sums(self):
        """This replica's window, as :class:`gaviz.training.window.WindowSums`."""
        count = self.window_count.read_value()
        zero = tf.constant(0.0)
        return window.WindowSums([t.read_value() for t in self.gradient_sums], zero, count,
                                 count, zero)

    def _update_if(self, is_due):
        """Applies the window where ``is_due()`` (a boolean tensor), deciding
        in cross-replica context: a ``cond`` whose branch synchronizes
        replicas must not run in replica context (keras-team/keras#20582)."""
        context = self._replica_context()
        if context is not None:
            # A closure, not an argument: merge_call would regroup it per replica.
            return context.merge_call(
                lambda strategy: self._cross_replica_update_if(strategy, is_due)
            )
        with self.strategy.scope():
            return self._cross_replica_update_if(self.strategy, is_due)

    def _cross_replica_update_if(self, strategy, is_due):
        return when(is_due(), lambda: strategy.extended.call_for_each_replica(self._replica_update))

    def _replica_update(self):
        """One optimizer step from the window, in replica context; then empty.

        Each replica hands the optimizer its own sums over the window's total
        count, and the optimizer sums them across replicas (its one
        all-reduce of the gradient): the window's gradient. The count (and,
        with a loss scale, whether any replica's sums are finite) is
        all-reduced once before.
        """
        context = tf.distribute.get_replica_context()
        sums, count = self._window_sums().gradients, self.window_count.read_value()
        loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        if context.num_replicas_in_sync > 1:
            not_finite = 1.0 - tf.cast(window.all_finite(0.0, sums), tf.float32)
            count, not_finite = context.all_reduce(
                tf.distribute.ReduceOp.SUM, [count, not_finite]
            )
            if loss_scaled:
                # Every replica skips, not only those whose share overflowed.
                sums = [tf.where(not_finite > 0, s * float("nan"), s) for s in sums]
        apply_to(self.optimizer, window.finish(sums, count), self.trained_variables)
        with tf.control_dependencies(sums + [count]):
            for total in self.gradient_sums:
                total.assign(tf.zeros_like(total))
            self.window_count.assign(0.0)
            self.micro_steps_in_window.assign(0)


class FlushAtEpochEnd(keras.callbacks.Callback):
    """A Keras callback: applies each accumulator's partial window at the end
    of every epoch of ``Model.fit``, before validation, as the big batch's
    last, smaller batch is applied before Keras validates.

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

    def _flush(self):
        for accumulator in self.accumulators:
            accumulator.flush()

    def on_train_begin(self, logs=None):
        self._training = True

    def on_train_end(self, logs=None):
        self._training = False

    def on_test_begin(self, logs=None):
        # Model.fit validates after the epoch's last step and before
        # on_epoch_end: the partial window belongs to the epoch validated.
        if self._training:
            self._flush()

    def on_epoch_end(self, epoch, logs=None):
        self._flush()


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
    inner = getattr(variables[0], "value", variables[0])
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
    if tf.executing_eagerly() and not (float(count) > 0 or replicas > 1 and float(count) == 0):
        raise ValueError(
            f"`count` must be {_count_expected(replicas)}: what the micro-batch's loss "
            f"divides by (its rows, real tokens or weight sum). Received: count={float(count)}"
        )
    return count


def _count_expected(replicas: int) -> str:
    """A replica's share of a global micro-batch may be empty; a micro-batch may not."""
    return "> 0" if replicas == 1 else ">= 0 (0: this replica's share is empty)"


def _check_clipping(optimizer, strategy):
    """Keras clips each replica's share of a gradient before it sums them
    across replicas: not the window's gradient. Refused rather than changed."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    clipping = [name for name in ("clipnorm", "clipvalue", "global_clipnorm")
                if getattr(inner, name, None) is not None]
    if clipping and strategy.num_replicas_in_sync > 1:
        raise ValueError(
            f"`optimizer` clips gradients ({', '.join(clipping)}) under a strategy of "
            f"{strategy.num_replicas_in_sync} replicas: Keras clips each replica's share "
            "of the gradient before summing them, not the window's gradient, so the update "
            "would not be the big batch's. Clip in one replica's loop, or use "
            "gaviz.AccumulationTrainer, which clips the window's gradient."
        )


def _replica_local(initial_value, name):
    """A variable each replica updates on its own; read across replicas, the sum."""
    return tf.Variable(
        initial_value, trainable=False, name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
    )


def _sum_name(variable) -> str:
    name = getattr(variable, "path", None) or variable.name
    return "gradient_sum_" + name.replace("/", "_").replace(":", "_")
