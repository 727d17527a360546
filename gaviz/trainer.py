"""The exact gradient-accumulation trainer: one graph call per optimizer update."""

from __future__ import annotations

import time
from typing import Callable, Iterable

import keras
import tensorflow as tf

from gaviz import checks, window
from gaviz.history import History, Update
from gaviz.losses import per_sample_loss


class AccumulationTrainer(tf.Module):
    """Trains a Keras model on micro-batches, updating once per window of them.

    Each update applies the gradient of the effective batch's loss::

        g = sum_window(w_i * l_i) / n_window + grad(weight regularization)

    with ``n_window`` the window's sample count, so the weights equal those of
    plain training on big batches made of the same micro-batches (for models
    without batch-dependent layers such as BatchNormalization), whatever the
    optimizer, ragged micro-batches and partial windows included.

    A window is consumed inside one ``tf.function`` call: the graph pulls up to
    ``accumulation_steps`` micro-batches from the dataset iterator, adds their
    summed gradients into float32 running sums, and applies the update. The
    Python loop in ``fit`` only runs once per update. Micro-steps run one after
    another, never overlapping, so one micro-batch's activations are alive at a
    time: the peak memory is plain training's on one micro-batch plus the
    window's sums, about one copy of the weights (benchmarks/bench_memory.py).

    Counters (``tf.Variable``s, so they live in the graph and in checkpoints):
    ``optimizer.iterations`` counts updates applied (learning-rate schedules
    read it); ``micro_step`` counts micro-batches consumed;
    ``skipped_windows`` counts windows a loss-scaling optimizer skipped;
    ``micro_steps_in_window``, ``window_sample_count`` and ``accumulators``
    hold a window carried into the next epoch (``tail="carry"``).

    Args:
        model: a ``keras.Model``. Built on the first micro-batch if it is not.
        optimizer: a Keras optimizer without ``gradient_accumulation_steps``.
            Clipping set on it (``clipnorm``, ``global_clipnorm``...) applies
            to the accumulated gradient.
        loss: a ``keras.losses.Loss``, a Keras loss name, or a callable
            ``(y_true, y_pred)`` returning per-sample losses.
        accumulation_steps: micro-batches per update (an int >= 1).
        tail: what happens to a partial window at the end of an epoch:
            ``"flush"`` applies it, normalized by its own sample count;
            ``"drop"`` discards it; ``"carry"`` continues it into the next epoch.
        normalize: what the window's summed loss is divided by:
            ``"samples"``, its number of loss elements (Keras's
            ``sum_over_batch_size`` on the big batch); ``"weights"``, its total
            sample weight, e.g. the number of real tokens when the weights
            mask padding (the fix Hugging Face adopted for token-level losses).
        jit_compile: compile each micro-step's forward and backward pass with
            XLA.
        strategy: a ``tf.distribute.Strategy`` (default: the one in scope).
            Build the model and optimizer under ``strategy.scope()`` and batch
            the dataset with the global micro-batch size (per-replica size
            times ``strategy.num_replicas_in_sync``): each global micro-batch
            is split across replicas, micro-steps accumulate locally on each
            replica with no cross-replica traffic, and the window's sums are
            all-reduced once per update, then normalized by the global count.
            With a ``keras.optimizers.LossScaleOptimizer``, the window is
            unscaled once; a window whose scaled gradients overflow is skipped
            and the loss scale lowered (counted in ``skipped_windows``).

    Raises:
        TypeError, ValueError: an argument is not what is described above.
    """

    def __init__(
        self,
        model,
        optimizer,
        loss,
        accumulation_steps: int,
        tail: str = "flush",
        normalize: str = "samples",
        jit_compile: bool = False,
        strategy: tf.distribute.Strategy | None = None,
    ):
        super().__init__(name="accumulation_trainer")
        checks.check_model(model)
        self.strategy = checks.check_strategy(strategy, model)
        checks.check_optimizer(optimizer)
        checks.check_one_of("tail", tail, checks.TAIL_POLICIES)
        checks.check_one_of("normalize", normalize, checks.NORMALIZATIONS)
        self.accumulation_steps = checks.check_positive_int(
            "accumulation_steps", accumulation_steps
        )
        self.model = model
        self.optimizer = optimizer
        self.tail = tail
        self.normalize = normalize
        self.jit_compile = bool(jit_compile)
        self._loss_fn = per_sample_loss(loss)
        #: Set to True (from a callback or another thread) to end ``fit`` after
        #: the current window; the trainer stays consistent and can go on.
        self.stop_training = False

        with self.strategy.scope():
            # Global counters: the same on every replica.
            self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_step")
            self.micro_steps_in_window = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="micro_steps_in_window"
            )
            self.skipped_windows = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="skipped_windows"
            )
            # A carried window's sums: each replica keeps its own share; reading
            # them across replicas gives the total.
            self.window_sample_count = _replica_local(0.0, "window_sample_count")
            self.window_normalizer = _replica_local(0.0, "window_normalizer")
            self.window_loss_sum = _replica_local(0.0, "window_loss_sum")
        self.accumulators = []
        self._built_state = False
        self._checked_spec = None
        if model.built and model.trainable_variables:
            self._build_state()
        self._window_fn = tf.function(self._window)
        self._micro_gradients_fn = tf.function(
            self._micro_gradients, jit_compile=self.jit_compile
        )

    # ------------------------------------------------------------------ state

    #: Whether accumulated gradients must outlive a ``fit`` call. Only a window
    #: carried into the next epoch does; otherwise every window starts and
    #: ends inside one graph call and its sums live in loop tensors only.
    _keep_accumulators = False

    def _build_state(self):
        """Creates optimizer slots and, for ``tail="carry"``, accumulators."""
        variables = self.model.trainable_variables
        if self._keep_accumulators or self.tail == "carry":
            with self.strategy.scope():
                self.accumulators = [
                    _replica_local(
                        tf.zeros(v.shape, dtype=_accumulator_dtype(v)),
                        "accumulator_" + v.name.replace("/", "_").replace(":", "_"),
                    )
                    for v in variables
                ]
        with self.strategy.scope():
            self.optimizer.build(variables)
        self._loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        # Static facts the window function reads at trace time.
        self._regularized = [
            v for v in variables if getattr(v, "regularizer", None) is not None
        ]
        self._built_state = True

    @property
    def tracing_count(self) -> int:
        """How many times the window function was traced (1 after any number of windows)."""
        return self._window_fn.experimental_get_tracing_count()

    @property
    def num_replicas(self) -> int:
        """Replicas training in sync (1 without distribution)."""
        return self.strategy.num_replicas_in_sync

    def effective_batch_size(self, micro_batch_size: int) -> int:
        """Samples in a full window, given the per-replica micro-batch size.

        ``micro_batch_size * accumulation_steps * num_replicas``.
        """
        micro_batch_size = checks.check_positive_int("micro_batch_size", micro_batch_size)
        return micro_batch_size * self.accumulation_steps * self.num_replicas

    # ------------------------------------------------------------ graph code

    def _micro_gradients(self, x, y, sample_weight):
        """Forward and backward pass of one micro-batch, unnormalized.

        Returns gradients of the micro-batch's objective, the objective, its
        sample count, and what it adds to the window's normalizer. The exact
        objective is the summed weighted loss (plus the forward losses added
        with ``add_loss``, such as activity regularizers, rescaled to sums).
        """
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)
            losses = self._loss_fn(y, y_pred)
            if losses.shape.rank == 0:
                raise ValueError(
                    "`loss` must return one loss per sample, shape (batch, ...); it "
                    "returned a scalar. Pass a Keras loss object, a loss name, or a "
                    "function without reduction."
                )
            loss_sum, count, weight_sum = window.weighted_loss_sum(losses, sample_weight)
            forward = self._forward_losses()
            if forward is not None:
                # Keras divides activity losses by the micro-batch size: undo it so
                # the window divides them, like the data loss, by its own count.
                batch = tf.cast(tf.shape(tf.nest.flatten(y_pred)[0])[0], tf.float32)
                loss_sum += batch * forward
            normalizer = weight_sum if self.normalize == "weights" else count
            objective, normalizer = self._micro_objective(loss_sum, normalizer)
            # A loss-scaling optimizer's scale (1 for others) keeps float16
            # gradients from underflowing; the optimizer unscales once per window.
            scaled = self.optimizer.scale_loss(objective)
        return _gradients(tape, scaled, variables), objective, count, normalizer

    def _micro_objective(self, loss_sum, normalizer):
        """What a micro-batch contributes: ``(objective, normalizer increment)``.

        Exact: the unnormalized sum and the micro-batch's own share of the
        window's divisor. (Pitfalls change this line.)
        """
        return loss_sum, normalizer

    def _forward_losses(self):
        """Sum of the losses the last forward pass added (not weight regularization).

        ``model.losses`` lists those first, then one penalty per regularized
        weight, which it recomputes on every access: read it once.
        """
        losses = self.model.losses
        n_forward = len(losses) - len(self._regularized)
        if n_forward <= 0:
            return None
        return tf.add_n([tf.cast(l, tf.float32) for l in losses[:n_forward]])

    def _micro_step(self, element):
        """One micro-batch: ``(grads, objective, sample_count, normalizer)``."""
        x, y, sample_weight = _unpack(element)
        return self._micro_gradients_fn(x, y, sample_weight)

    def _replica_micro_step(self, element, grads, loss_sum, count, normalizer):
        """Adds one micro-batch to this replica's running sums (no communication)."""
        micro_grads, objective, micro_count, micro_normalizer = self._micro_step(element)
        # Add once the whole backward pass is done. Added as each gradient
        # arrives, a new sum would be allocated while the micro-batch's
        # activations are still alive, raising the peak by the largest weight.
        with tf.control_dependencies(micro_grads):
            grads = window.add_gradients(grads, micro_grads)
        return (
            grads,
            loss_sum + objective,
            count + micro_count,
            normalizer + micro_normalizer,
        )

    def _replica_all_reduce(self, grads, loss_sum, count, normalizer):
        """The update's one all-reduce: every sum of the window, in one batch."""
        # identity places loop outputs on this replica's device (all_reduce
        # needs to know where each value lives).
        local = tf.nest.map_structure(tf.identity, (grads, loss_sum, count, normalizer))
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)

    def _window_divisor(self, normalizer, micro_steps):
        """What the window's sums are divided by (exact: its normalizer)."""
        del micro_steps  # the exact divisor does not depend on the window's length
        return normalizer

    def _regularization(self, micro_steps):
        """Weight regularization and its gradient, counted once per update."""
        del micro_steps  # the exact penalty does not depend on the window
        if not self._regularized:
            return tf.constant(0.0), None
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            penalty = tf.add_n(
                [tf.cast(v.regularizer(v), tf.float32) for v in self._regularized]
            )
        return penalty, _gradients(tape, penalty, variables)

    def _replica_load(self):
        """This replica's share of the window's sums (non-zero only when carried)."""
        if self.accumulators:
            grads = [a.read_value() for a in self.accumulators]
        else:
            grads = [
                tf.zeros(v.shape, dtype=_accumulator_dtype(v))
                for v in self.model.trainable_variables
            ]
        return (
            grads,
            self.window_loss_sum.read_value(),
            self.window_sample_count.read_value(),
            self.window_normalizer.read_value(),
        )

    def _window(self, iterator):
        """Consumes one window from ``iterator`` and applies it if it is due.

        Each replica's sums are loop tensors, not variables: one read before
        the loop and one write after it. They cross replicas once, after the
        loop, in one batched all-reduce: the update's only cross-replica traffic.
        Returns the window's description, packed as ``_WINDOW_RESULT`` lists.
        """
        k = tf.constant(self.accumulation_steps, tf.int64)
        sums = self.strategy.run(self._replica_load)
        steps = self.micro_steps_in_window.read_value()
        consumed = tf.constant(0, tf.int64)
        exhausted = tf.constant(False)
        while steps < k and not exhausted:
            # One micro-step at a time. A while loop runs up to 10 iterations
            # at once, and nothing but the sums orders one micro-step after
            # another: the benchmarks measured two micro-batches' activations
            # alive at the peak (57 MiB against 31 MiB), which is what
            # accumulation is for avoiding. The price, on a model so small
            # that dispatch dominates, is about 15% of the epoch time.
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            element = iterator.get_next_as_optional()
            exhausted = not element.has_value()
            if not exhausted:
                sums = self.strategy.run(
                    self._replica_micro_step, args=(element.get_value(), *sums)
                )
                steps += 1
                consumed += 1

        reduced = self.strategy.run(self._replica_all_reduce, args=sums)
        # Every replica now holds the same totals: take the first copy.
        grads, loss_sum, count, normalizer = self.strategy.experimental_local_results(reduced)[0]
        full = steps >= k
        if self.tail == "carry":
            done = full
        else:
            done = full or exhausted
        due = full or (exhausted and self.tail == "flush" and count > 0)

        penalty, reg_grads = self._regularization(steps)
        divisor = self._window_divisor(normalizer, steps)
        loss = tf.math.divide_no_nan(loss_sum, divisor) + penalty
        final = window.finish_gradients(grads, divisor, reg_grads)
        if self._loss_scaled:
            # Scaled gradients may overflow: the optimizer skips such a window
            # and lowers its scale. Only a non-finite loss is an error.
            finite = tf.reduce_all(tf.math.is_finite(loss))
        else:
            finite = window.all_finite(loss, final)
        applied = due and finite
        if self._loss_scaled:
            iterations = tf.identity(self.optimizer.iterations.value)
        if applied:
            self._apply(final)
        skipped = tf.constant(False)
        if self._loss_scaled:  # only a loss-scaling optimizer skips a window
            skipped = applied and self.optimizer.iterations.value == iterations
            if skipped:
                self.skipped_windows.assign_add(1)
        if done:
            self._reset(sums)
        else:
            self._store(sums, steps)
        self.micro_step.assign_add(consumed)
        # One float64 vector, read with one device-to-host copy per update
        # (the fields are _WINDOW_RESULT's; float64 holds every value exactly).
        return tf.stack(
            [
                tf.cast(value, tf.float64)
                for value in (
                    applied and not skipped,
                    due,
                    finite,
                    exhausted,
                    loss,
                    count,
                    steps,
                    consumed,
                )
            ]
        )

    def _apply(self, grads):
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(
            [(tf.cast(g, v.dtype), v) for g, v in zip(grads, variables)]
        )

    def _store(self, sums, steps):
        """Keeps an unfinished window for the next call (``tail="carry"``).

        ``sums`` are per-replica ``(grads, loss_sum, count, normalizer)``.
        """
        self.strategy.run(self._replica_store, args=sums)
        self.micro_steps_in_window.assign(steps)

    def _replica_store(self, grads, loss_sum, count, normalizer):
        for accumulator, grad in zip(self.accumulators, grads):
            accumulator.assign(grad)
        self.window_loss_sum.assign(loss_sum)
        self.window_sample_count.assign(count)
        self.window_normalizer.assign(normalizer)

    def _reset(self, sums):
        """Ends a window: the next one starts from zero."""
        del sums  # the exact trainer forgets them (pitfalls may not)
        # In replica context: each replica zeroes its own share, no traffic.
        self.strategy.run(self._replica_reset)
        self.micro_steps_in_window.assign(0)

    def _replica_reset(self):
        for accumulator in self.accumulators:
            accumulator.assign(tf.zeros_like(accumulator))
        self._replica_reset_counters()

    def _replica_reset_counters(self):
        self.window_loss_sum.assign(0.0)
        self.window_sample_count.assign(0.0)
        self.window_normalizer.assign(0.0)

    def _reset_counters(self):
        """Zeroes the window counters, accumulators untouched."""
        self.strategy.run(self._replica_reset_counters)
        self.micro_steps_in_window.assign(0)

    # ------------------------------------------------------------ Python loop

    def fit(
        self,
        dataset,
        epochs: int = 1,
        on_update: Callable[[Update], None] | Iterable[Callable[[Update], None]] | None = None,
    ) -> History:
        """Trains on ``dataset`` for ``epochs`` epochs, one update per window.

        Args:
            dataset: a ``tf.data.Dataset`` of micro-batches ``(x, y)`` or
                ``(x, y, sample_weight)``; iterated afresh each epoch.
            epochs: number of passes over ``dataset`` (an int >= 1).
            on_update: a callable, or several, called with an
                :class:`~gaviz.history.Update` after each applied update.
                Setting ``trainer.stop_training = True`` ends ``fit`` after
                the current window.

        Returns:
            A :class:`~gaviz.history.History` with one record per update.

        Raises:
            FloatingPointError: a window's loss or gradient is not finite. That
                update is not applied (the weights are those before it) and
                its window is discarded.
            TypeError, ValueError: bad ``dataset``, ``epochs`` or targets.
        """
        epochs = checks.check_positive_int("epochs", epochs)
        checks.check_dataset(dataset)
        callbacks = _as_callbacks(on_update)
        self._prepare(dataset)

        history = History()
        samples_seen = 0
        start = time.perf_counter()
        self.stop_training = False
        source = dataset
        if self.num_replicas > 1 or _is_multi_worker(self.strategy):
            source = self.strategy.experimental_distribute_dataset(dataset)
        window_fn = None
        for epoch in range(1, epochs + 1):
            iterator = iter(source)
            if window_fn is None:
                # The traced graph itself: calling it skips matching the
                # iterator against every trace on each call (the iterator's
                # type is the same every epoch).
                window_fn = self._window_fn.get_concrete_function(iterator)
            consumed = 0
            while not self.stop_training:
                result = dict(zip(_WINDOW_RESULT, window_fn(iterator).numpy()))
                consumed += int(result["consumed"])
                if result["due"] and not result["finite"]:
                    raise FloatingPointError(
                        f"Update {len(history) + 1} (epoch {epoch}) has a non-finite loss "
                        f"or gradient (loss={float(result['loss'])}; optimizer.iterations="
                        f"{int(self.optimizer.iterations.numpy())} before it). It was not applied: "
                        f"the weights are those after update {len(history)}, and its window "
                        "was discarded. Lower the learning rate or check the data."
                    )
                if result["applied"]:
                    samples_seen += int(round(float(result["sample_count"])))
                    update = Update(
                        update=len(history) + 1,
                        epoch=epoch,
                        loss=float(result["loss"]),
                        effective_batch_size=int(round(float(result["sample_count"]))),
                        micro_steps=int(result["micro_steps"]),
                        samples_seen=samples_seen,
                        seconds=time.perf_counter() - start,
                    )
                    history.append(update)
                    for callback in callbacks:
                        callback(update)
                if result["exhausted"]:
                    break
            if consumed == 0 and not self.stop_training:
                if epoch == 1:
                    raise ValueError("`dataset` is empty: it yielded no micro-batches.")
                raise ValueError(
                    f"`dataset` yielded no micro-batches in epoch {epoch}. A dataset that "
                    "can be iterated only once (from a generator, say) needs .cache() or "
                    "a fresh dataset per epoch."
                )
            if self.stop_training:
                break
        return history

    def _prepare(self, dataset):
        """Builds model and state on the first micro-batch and checks its targets.

        Skipped for a dataset whose element spec was already checked: the eager
        forward pass costs as much as a few windows of a small model.
        """
        if self._built_state and dataset.element_spec == self._checked_spec:
            return
        first = next(iter(dataset.take(1)), None)
        if first is None:
            raise ValueError("`dataset` is empty: it yielded no micro-batches.")
        x, y, _ = _unpack(first)
        y_pred = self.model(x, training=False)
        if not self._built_state:
            if not self.model.trainable_variables:
                raise ValueError("`model` has no trainable variables: nothing to train.")
            self._build_state()
        checks.check_targets(y, y_pred, None)
        try:
            losses = self._loss_fn(y, y_pred)
        except Exception as error:  # the loss's own message, with our context
            raise ValueError(
                f"`loss` failed on the first micro-batch: targets of shape "
                f"{tuple(y.shape)}, model outputs of shape {tuple(y_pred.shape)}: {error}"
            ) from error
        checks.check_targets(y, y_pred, losses)
        self._checked_spec = dataset.element_spec


#: What the window function reports, in the order it packs them.
_WINDOW_RESULT = (
    "applied",  # an update was applied (not skipped by loss scaling)
    "due",  # the window was complete, or a flushed tail
    "finite",  # its loss and gradient were finite
    "exhausted",  # the dataset ran out during this call
    "loss",  # the window's loss: summed loss / normalizer + regularization
    "sample_count",  # samples (loss elements) in the window
    "micro_steps",  # micro-batches in the window, carried ones included
    "consumed",  # micro-batches this call pulled from the dataset
)


def _replica_local(initial_value, name):
    """A variable each replica updates on its own; read across replicas, the sum."""
    return tf.Variable(
        initial_value,
        trainable=False,
        name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
    )


def _is_multi_worker(strategy):
    return getattr(strategy.extended, "_num_workers", 1) > 1


def _gradients(tape, target, variables):
    """Gradients of ``target``; zeros for variables it does not reach.

    (``UnconnectedGradients.ZERO`` fails on Keras variables, whose dtype is a
    string, so the zeros are made here.)
    """
    grads = tape.gradient(target, variables)
    return [
        tf.zeros(v.shape, dtype=tf.as_dtype(v.dtype)) if g is None else g
        for g, v in zip(grads, variables)
    ]


def _unpack(element):
    if len(element) == 3:
        return element
    x, y = element
    return x, y, None


def _accumulator_dtype(variable):
    # Half-precision variables still accumulate in float32: summing many small
    # float16 gradients loses them.
    dtype = tf.as_dtype(variable.dtype)
    return tf.float64 if dtype == tf.float64 else tf.float32


def _as_callbacks(on_update):
    if on_update is None:
        return []
    if callable(on_update):
        return [on_update]
    callbacks = list(on_update)
    for callback in callbacks:
        if not callable(callback):
            raise TypeError(
                f"`on_update` must be a callable or a list of callables. Received an "
                f"element {callback!r}"
            )
    return callbacks
