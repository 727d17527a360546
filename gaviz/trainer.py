"""The exact gradient-accumulation trainer: the window's loop inside the graph.

One ``tf.function`` call runs one or more windows. A window pulls up to
``accumulation_steps`` micro-batches from the dataset iterator, adds each
one's summed gradients into float32 running sums (loop tensors, not
variables), then, in order: sums them across replicas once; finishes them
(due or not, weight penalty, divisor, finite or not); applies the update or
skips it; closes the window (the next one starts from zero, or it is kept
for the next call). The Python loop that drives the calls is in
:mod:`gaviz.fitting`; the arithmetic is in :mod:`gaviz.window` and
:mod:`gaviz.rules`; counters and a carried window live in
:mod:`gaviz.state`.
"""

from __future__ import annotations

from typing import Callable, Iterable

import keras
import tensorflow as tf

from gaviz import _tensorflow, checks, compiling, fitting, rules, sources, window
from gaviz.history import History, Update
from gaviz.objective import Objective
from gaviz.state import TrainerState
from gaviz.window import WindowResult, WindowSums


class AccumulationTrainer(tf.Module):
    """Trains a Keras model on micro-batches, updating once per window of them.

    Each update applies the gradient of the effective batch's loss::

        g = sum_window(w_i * l_i) / n_window + grad(weight regularization)

    with ``n_window`` the window's sample count, so the weights equal those of
    plain training on big batches made of the same micro-batches (for models
    without batch-dependent layers such as BatchNormalization), whatever the
    optimizer, ragged micro-batches and partial windows included.

    Micro-steps run one after another, never overlapping, so one
    micro-batch's activations are alive at a time: the peak memory is plain
    training's on one micro-batch plus the window's sums, about one copy of
    the weights (benchmarks/bench_memory.py).

    Counters (``tf.Variable``s, in the graph and in checkpoints):
    ``optimizer.iterations`` counts updates applied (learning-rate schedules
    read it); ``micro_step`` counts micro-batches consumed;
    ``skipped_windows`` counts windows a loss-scaling optimizer skipped;
    ``micro_steps_in_window`` counts the micro-batches of a window carried
    into the next epoch (``tail="carry"``).

    Args:
        model: a ``keras.Model``. Built on the first micro-batch if it is not.
        optimizer: a Keras optimizer without ``gradient_accumulation_steps``
            (default: the one ``model.compile`` was given). Clipping set on it
            (``clipnorm``, ``global_clipnorm``...) applies to the accumulated
            gradient. The model is compiled with it, so ``model.optimizer`` is
            the optimizer this trainer steps.
        loss: what ``compile`` takes (default: the model's compiled loss): a
            ``keras.losses.Loss``, a Keras loss name, a callable ``(y_true,
            y_pred)`` returning per-sample losses, or a dict or list of them
            for several outputs. Its ``reduction`` is honoured; Keras masks
            (``Embedding(mask_zero=True)``, ``ignore_class``) are applied.
        accumulation_steps: micro-batches per update: an int >= 1, or a
            callable ``epoch -> int`` (epochs count from 1) for a schedule
            such as a batch-size warm-up. Read once per epoch, so the windows
            of an epoch share one k; k is a graph value, so a new k retraces
            nothing. (Per epoch, not per update: a window never changes size
            while it fills, and ``history.accumulation_steps`` records each
            update's k.)
        tail: what happens to a partial window at the end of an epoch:
            ``"flush"`` applies it, normalized by its own sample count;
            ``"drop"`` discards it; ``"carry"`` continues it into the next epoch.
        normalize: what the window's summed loss is divided by (default:
            what the loss's ``reduction`` says): ``"samples"``, its number of
            unmasked loss elements (Keras's ``sum_over_batch_size`` on the big
            batch); ``"weights"``, its total sample weight, e.g. the number of
            real tokens when the weights mask padding (the fix Hugging Face
            adopted for token-level losses); ``"sum"``, nothing.
        jit_compile: compile with XLA. On arrays (``fit(x, y)``), the whole
            graph call is one XLA program: micro-steps, updates and the
            window loop, which on a small model removes most of what a
            window costs beyond its arithmetic (benchmarks/bench_dispatch.py).
            On a ``tf.data.Dataset``, whose iterator XLA cannot compile, each
            micro-step's forward and backward pass is. The model's layers
            must have XLA kernels. XLA plans the program's memory itself:
            still one micro-batch's activations at a time, but its peak
            holds several copies of the weights (benchmarks/bench_memory.py),
            so where memory is the constraint, leave it off.
        strategy: a ``tf.distribute.Strategy`` (default: the one in scope).
            Build the model and optimizer under ``strategy.scope()`` and batch
            the dataset with the global micro-batch size: each global
            micro-batch is split across replicas, micro-steps accumulate
            locally with no cross-replica traffic, and the window's sums are
            all-reduced once per update, then normalized by the global count.
            With a ``keras.optimizers.LossScaleOptimizer`` the window is
            unscaled once; a window whose scaled gradients overflow is skipped
            and the loss scale lowered (counted in ``skipped_windows``).
        windows_per_call: windows one graph call may run (as Keras's
            ``steps_per_execution``), or ``"auto"``: one while ``on_update``
            callbacks listen (each update is reported before the next starts,
            so ``stop_training`` lands after exactly that update), otherwise
            doubled while calls take under 20 ms (on one worker; with several,
            each would time its own calls, so it stays one). Callbacks see
            every update either way, after the call that applied it.
        metrics: what ``compile`` takes (default: the model's compiled
            metrics): Keras metric objects or names, updated on every
            micro-batch, so their epoch values are the big batch's.
        loss_weights: as ``compile`` takes them (default: the compiled ones).

    Raises:
        TypeError, ValueError: an argument is not what is described above.

    Subclassing:
        The arithmetic is data: set the class attribute ``rule`` to a
        :class:`gaviz.rules.Rule`. Three hooks change what state does; each
        runs inside the graph:

        - ``on_micro_batch(micro) -> WindowSums``: in replica context, after
          a micro-batch's backward pass, before it is added to the window.
        - ``reduce_window(sums) -> WindowSums``: in replica context, once
          per window: its sums across replicas (one batched all-reduce).
        - ``next_window(sums) -> WindowSums``: in replica context, after a
          window closes: what the next one starts from (zeros). A subclass
          whose next window starts from anything but zeros sets
          ``window_sums_outlive_updates = True``, so the sums are kept in
          variables between calls.
    """

    #: The window's arithmetic (gaviz.rules.EXACT: sum, then divide once).
    rule: rules.Rule = rules.EXACT
    #: Whether ``next_window`` may start from anything but zeros.
    window_sums_outlive_updates = False
    #: Whether the class is exact only on one replica (the pitfalls).
    single_replica_only = False

    def __init__(
        self,
        model,
        optimizer=None,
        loss=None,
        accumulation_steps: int | Callable[[int], int] | None = None,
        tail: str = "flush",
        normalize: str | None = None,
        jit_compile: bool = False,
        strategy: tf.distribute.Strategy | None = None,
        windows_per_call: int | str = "auto",
        metrics=None,
        loss_weights=None,
    ):
        super().__init__(name="accumulation_trainer")
        checks.check_model(model)
        self.strategy = checks.check_strategy(strategy, model)
        checks.check_single_replica(type(self), self.strategy)
        if optimizer is not None:
            checks.check_optimizer(optimizer)
        self.tail = checks.check_one_of("tail", tail, checks.TAIL_POLICIES)
        if normalize is not None:
            checks.check_one_of("normalize", normalize, checks.NORMALIZATIONS)
        self.accumulation_steps = checks.check_accumulation_steps(accumulation_steps)
        self.windows_per_call = checks.check_windows_per_call(windows_per_call)
        self.call_size = fitting.CallSize(
            self.windows_per_call, fitting.worker_count(self.strategy)
        )
        self.model = model
        self.jit_compile = bool(jit_compile)
        checks.check_loss(loss)
        compiled = compiling.compile_for_trainer(
            model, self.strategy, optimizer, loss, metrics, loss_weights
        )
        checks.check_optimizer(compiled.optimizer)
        self.optimizer = compiled.optimizer
        self.loss = compiled.loss
        self.objective = Objective(
            model._compile_loss, getattr(model, "output_names", None), normalize
        )
        self.state = TrainerState(self.strategy)
        self._built = False
        self._checked_spec = None
        if model.built and model.trainable_variables:
            self._build()
        self._windows_fn = tf.function(self._iterator_windows)
        # Arrays: with jit_compile, XLA compiles the whole call (every
        # micro-step, update and window loop in one program).
        self._array_windows_fn = tf.function(
            self._array_windows, reduce_retracing=True, jit_compile=self.jit_compile
        )
        self._micro_sums_fn = (
            tf.function(self._micro_sums, jit_compile=True) if jit_compile else self._micro_sums
        )

    def _build(self):
        """Creates optimizer slots, static facts, and carried sums if needed."""
        if int(self.state.micro_step.numpy()) > 0:
            # Counters exist from the start, so a checkpoint restored them;
            # the model's weights, optimizer slots and a carried window did
            # not exist then, and Keras does not restore them later.
            raise ValueError(
                "`model` was not built when this trainer was restored from a checkpoint "
                f"(it had consumed {int(self.state.micro_step.numpy())} micro-batches): "
                "its weights, optimizer state and any carried window were created after "
                "the restore and hold fresh values, not the checkpoint's. Build the model "
                "before restoring (model.build(input_shape), or call it on a batch), "
                "then create the trainer and restore."
            )
        variables = self.model.trainable_variables
        carry = self.tail == "carry" or self.window_sums_outlive_updates
        self.state.build(variables, carry=carry)
        with self.strategy.scope():
            self.optimizer.build(variables)
        self._loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self._regularized = [v for v in variables if getattr(v, "regularizer", None) is not None]
        self._built = True

    # ------------------------------------------------------------ properties

    micro_step = property(lambda self: self.state.micro_step, doc="Micro-batches consumed.")
    micro_steps_in_window = property(
        lambda self: self.state.micro_steps_in_window, doc="Micro-batches of a carried window."
    )
    skipped_windows = property(
        lambda self: self.state.skipped_windows, doc="Windows a loss-scaling optimizer skipped."
    )
    accumulators = property(
        lambda self: self.state.accumulators, doc="A carried window's gradient sums, per replica."
    )

    @property
    def tracing_count(self) -> int:
        """How many times the window functions were traced (1 after any number of
        windows of datasets with one element structure)."""
        return sum(
            f.experimental_get_tracing_count() for f in (self._windows_fn, self._array_windows_fn)
        )

    @property
    def num_replicas(self) -> int:
        """Replicas training in sync (1 without distribution)."""
        return self.strategy.num_replicas_in_sync

    def accumulation_steps_for(self, epoch: int) -> int:
        """k in ``epoch`` (counted from 1): the int, or the schedule's value."""
        if not callable(self.accumulation_steps):
            return self.accumulation_steps
        return checks.check_positive_int(
            f"accumulation_steps({epoch})", self.accumulation_steps(epoch)
        )

    def effective_batch_size(self, micro_batch_size: int, epoch: int = 1) -> int:
        """Samples in a full window: ``micro_batch_size * k * num_replicas``.

        ``micro_batch_size`` is per replica; ``epoch`` matters for a schedule of k.
        """
        micro_batch_size = checks.check_positive_int("micro_batch_size", micro_batch_size)
        return micro_batch_size * self.accumulation_steps_for(epoch) * self.num_replicas

    def window_function(self, iterator):
        """The traced graph one call runs, for ``iterator`` (to inspect its ops)."""
        return self._windows_fn.get_concrete_function(
            iterator, tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int64)
        )

    # --------------------------------------------------------------- hooks

    def on_micro_batch(self, micro: WindowSums) -> WindowSums:
        """What a micro-batch adds, after its backward pass (exact: unchanged)."""
        return micro

    def reduce_window(self, sums: WindowSums) -> WindowSums:
        """The window's one all-reduce: every sum, in one batch."""
        # identity places loop outputs on this replica's device (all_reduce
        # needs to know where each value lives).
        local = tf.nest.map_structure(tf.identity, sums)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)

    def next_window(self, sums: WindowSums) -> WindowSums:
        """What the window after a closed one starts from (exact: zeros)."""
        del sums
        return window.zeros(self.model.trainable_variables)

    # ---------------------------------------------------------- graph code

    def _iterator_windows(self, iterator, max_windows, accumulation_steps):
        return self._windows(sources.IteratorSource(iterator), max_windows, accumulation_steps)

    def _array_windows(self, arrays, order, batch_size, rows, max_windows, accumulation_steps):
        source = sources.ArraySource(
            arrays, order, self.state.array_cursor, batch_size, rows, compiled=self.jit_compile
        )
        return self._windows(source, max_windows, accumulation_steps)

    def _windows(self, source, max_windows, accumulation_steps):
        """Runs up to ``max_windows`` windows; returns ``(rows, done)``: one
        packed WindowResult row per window, the first ``done`` of them filled.

        Stops early when the dataset runs out or a due window is not finite
        (so the error is raised with the weights of the update before it).
        """
        variables = self.model.trainable_variables
        sums = self.strategy.run(self.state.replica_load, args=(variables,))
        steps = self.state.micro_steps_in_window.read_value()
        # A fixed size, as XLA needs: the most windows a call may run.
        rows = tf.TensorArray(
            tf.float64, size=self.call_size.capacity, element_shape=[len(WindowResult._fields)]
        )
        done = tf.constant(0)
        go_on = tf.constant(True)
        while go_on and done < max_windows:
            # Windows one at a time too: the next window's sums start from
            # zeros, so without this its first micro-step could run while this
            # window's gradients are still being applied (more memory at the peak).
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            sums, steps, result = self._window(source, sums, steps, accumulation_steps)
            with tf.name_scope("report"):
                rows = rows.write(done, result.pack())
            done += 1
            go_on = not result.exhausted and (result.finite or not result.due)
        if self.state.carries:
            self.strategy.run(self.state.replica_store, args=(sums,))
        self.state.micro_steps_in_window.assign(steps)
        return rows.stack(), done

    def _window(self, source, sums, steps, k):
        """One window, in four phases: accumulate, finish, apply, close."""
        # The name scopes name the phases' ops in a profile (benchmarks/profile_dispatch.py).
        sums, steps, consumed, exhausted = self._accumulate(source, sums, steps, k)
        with tf.name_scope("all_reduce"):
            totals = self._reduce(sums)
        full = steps >= k
        # A window ends full or with the data, so only "carry" keeps one open:
        # a Python True adds no conditional over every sum to each window.
        closes = full if self.tail == "carry" else True
        due = full or (exhausted and self.tail == "flush" and totals.sample_count > 0)
        with tf.name_scope("finish"):
            loss, grads, finite = self._finish(totals, steps, k)
        with tf.name_scope("update"):
            applied = self._update(due and finite, grads)
        with tf.name_scope("report"):
            self.strategy.run(self._track_window, args=(due and finite, loss, totals.rows))
            self.state.micro_step.assign_add(consumed)
            result = WindowResult(
                applied, due, finite, exhausted, loss, totals.sample_count, steps, consumed, k,
                totals.rows,
            )
        with tf.name_scope("close"):
            sums, steps = self._close(closes, sums, steps)
        return sums, steps, result

    def _accumulate(self, source, sums, steps, k):
        """Micro-steps until the window is full or the data runs out."""

        # Inside an XLA program already, the micro-step is not compiled again.
        micro_sums = self._micro_sums if source.compiled else self._micro_sums_fn

        def micro_step(element, sums):
            return self.strategy.run(self._replica_micro_step, args=(element, sums, micro_sums))

        return source.accumulate(micro_step, sums, steps, k)

    def _replica_micro_step(self, element, sums, micro_sums):
        """Adds one micro-batch to this replica's running sums (no communication)."""
        micro = self.rule.contribution(micro_sums(*_unpack(element)))
        if self.rule.clip_micro_batches:
            micro = self._clip_mean_gradient(micro)
        micro = self.on_micro_batch(micro)
        # Add once the whole backward pass is done. Added as each gradient
        # arrives, a new sum would be allocated while the micro-batch's
        # activations are still alive, raising the peak by the largest weight.
        with tf.control_dependencies(micro.gradients), tf.name_scope("add_to_sums"):
            return window.add(sums, micro)

    def _micro_sums(self, x, y, sample_weight):
        """Forward and backward pass of one micro-batch, unnormalized.

        The objective is the summed weighted loss (the compiled loss's terms,
        masks applied), plus the forward losses added with ``add_loss``
        (activity regularizers) rescaled to sums. The compiled metrics see
        the micro-batch: their sums and counts add up to the big batch's.
        """
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)
            with tf.name_scope("loss"):
                micro = self.objective.micro(y, y_pred, sample_weight)
                loss_sum = micro.loss_sum + self._forward_loss_sum(y_pred)
            # A loss-scaling optimizer's scale (1 for others) keeps float16
            # gradients from underflowing; the optimizer unscales once per window.
            scaled = self.optimizer.scale_loss(loss_sum)
        grads = _gradients(tape, scaled, self.model.trainable_variables)
        self._update_metrics(y, y_pred, sample_weight, micro)
        return WindowSums(grads, loss_sum, micro.sample_count, micro.normalizer, micro.rows)

    def _update_metrics(self, y, y_pred, sample_weight, micro):
        """Keras's compiled metrics and per-output loss trackers, on one micro-batch."""
        if self.model._compile_metrics is not None:
            self.model._compile_metrics.update_state(y, y_pred, sample_weight)
        for tracker, mean in zip(self.model._compile_loss.metrics, micro.output_means):
            tracker.update_state(mean, sample_weight=micro.rows)

    def _track_window(self, due, loss, rows):
        """Keras's loss tracker sees each window's loss, weighted by its samples.

        Runs in replica context, so each replica adds its share: the tracker's
        sums across replicas are the window's.
        """
        if due:
            share = tf.cast(self.num_replicas, tf.float32)
            self.model._loss_tracker.update_state(loss, sample_weight=rows / share)

    def _forward_loss_sum(self, y_pred):
        """The losses the last forward pass added, as a sum over its samples.

        ``model.losses`` lists those first, then one penalty per regularized
        weight (recomputed on every access: read it once). Keras divides
        activity losses by the micro-batch size; multiplying back lets the
        window divide them, like the data loss, by its own count.
        """
        losses = self.model.losses
        n_forward = len(losses) - len(self._regularized)
        if n_forward <= 0:
            return tf.constant(0.0)
        batch = tf.cast(tf.shape(tf.nest.flatten(y_pred)[0])[0], tf.float32)
        return batch * tf.add_n([tf.cast(l, tf.float32) for l in losses[:n_forward]])

    def _clip_mean_gradient(self, micro):
        """The micro-batch's mean gradient clipped by the optimizer, back as a sum."""
        mean = [tf.math.divide_no_nan(g, tf.cast(micro.normalizer, g.dtype)) for g in micro.gradients]
        clipped = self.optimizer._clip_gradients(mean)  # Keras's own clipping rules
        return micro._replace(
            gradients=[g * tf.cast(micro.normalizer, g.dtype) for g in clipped]
        )

    def _reduce(self, sums):
        """The window's totals across replicas (every replica holds the same)."""
        reduced = self.strategy.run(self.reduce_window, args=(sums,))
        return self.strategy.experimental_local_results(reduced)[0]

    def _finish(self, totals, steps, k):
        """``(loss, gradient, finite)`` of the window, by the rule."""
        penalty, penalty_grads = self._weight_penalty(steps)
        divisor = self.rule.divisor(totals.normalizer, steps, k)
        if self.objective.normalize == "sum":  # the loss's reduction is "sum"
            divisor = tf.ones_like(divisor)
        loss = tf.math.divide_no_nan(totals.loss_sum, divisor) + penalty
        grads = window.finish(totals.gradients, divisor, penalty_grads)
        if self._loss_scaled:
            # Scaled gradients may overflow: the optimizer skips such a window
            # and lowers its scale. Only a non-finite loss is an error.
            return loss, grads, tf.reduce_all(tf.math.is_finite(loss))
        return loss, grads, window.all_finite(loss, grads)

    def _weight_penalty(self, steps):
        """Weight regularization and its gradient, counted as the rule says."""
        if not self._regularized:
            return tf.constant(0.0), None
        times = self.rule.penalty_times(steps)
        with tf.GradientTape() as tape:
            penalty = tf.add_n([tf.cast(v.regularizer(v), tf.float32) for v in self._regularized])
        grads = _gradients(tape, penalty, self.model.trainable_variables)
        return penalty * times, [g * tf.cast(times, g.dtype) for g in grads]

    def _update(self, apply, grads):
        """Applies ``grads`` if ``apply``; True if an update really happened."""
        if not self._loss_scaled:
            if apply:
                self._apply(grads)
            return apply
        before = tf.identity(self.optimizer.iterations.value)
        if apply:
            self._apply(grads)
        skipped = apply and self.optimizer.iterations.value == before
        if skipped:
            self.state.skipped_windows.assign_add(1)
        return apply and not skipped

    def _apply(self, grads):
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(
            [(tf.cast(g, v.dtype), v) for g, v in zip(grads, variables)]
        )

    def _close(self, closes, sums, steps):
        """A closed window hands its sums to ``next_window``; an open one keeps them."""
        if closes:
            sums = self.strategy.run(self.next_window, args=(sums,))
            steps = tf.constant(0, tf.int64)
        return sums, steps

    # ---------------------------------------------------------- Python side

    @property
    def stop_training(self) -> bool:
        """``model.stop_training``: set it (from a callback, an ``on_update``
        function or another thread) to end ``fit`` after the current graph
        call; the trainer stays consistent and can go on."""
        return bool(getattr(self.model, "stop_training", False))

    @stop_training.setter
    def stop_training(self, value: bool) -> None:
        self.model.stop_training = bool(value)

    @property
    def normalize(self) -> str:
        """What a window is divided by: ``"samples"``, ``"weights"`` or ``"sum"``."""
        return self.objective.normalize

    def fit(
        self,
        x,
        y=None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose="auto",
        callbacks=None,
        validation_data=None,
        shuffle: bool = True,
        sample_weight=None,
        on_update: Callable[[Update], None] | Iterable[Callable[[Update], None]] | None = None,
        validation_batch_size: int | None = None,
        validation_freq: int = 1,
        initial_epoch: int = 0,
    ) -> History:
        """Trains for ``epochs`` epochs, one update per window of micro-batches.

        Takes ``Model.fit``'s arguments, with ``batch_size`` the size of a
        micro-batch; the numbers equal ``Model.fit(batch_size=k * b,
        shuffle=False)`` on the same data.

        Args:
            x: a ``tf.data.Dataset`` of micro-batches ``(x, y)`` or
                ``(x, y, sample_weight)``, iterated afresh each epoch; or the
                inputs as an array, tensor, or dict/list of them (several inputs).
            y: the targets, when ``x`` is arrays (one row per row of ``x``).
            batch_size: the micro-batch size, when ``x`` is arrays (default 32).
            epochs: number of passes over the data (an int >= 1).
            verbose: 0 silent, 1 Keras's progress bar (one step per update),
                2 one line per epoch, ``"auto"`` 1 (as Keras).
            callbacks: ``keras.callbacks.Callback`` objects, driven through
                Keras's ``CallbackList``: train, epoch and test events as in
                ``Model.fit``; batch events once per update (with several
                windows per graph call and no callback of yours, once per call).
            validation_data: ``(x_val, y_val)``, ``(x_val, y_val,
                sample_weight)`` or a dataset, evaluated with
                ``model.evaluate`` after each epoch (``val_*`` in the logs).
            shuffle: shuffle the rows of arrays each epoch (numpy's generator,
                which ``keras.utils.set_random_seed`` seeds). A dataset is
                used in its own order.
            sample_weight: one weight per row, when ``x`` is arrays.
            on_update: a callable, or several, called with an
                :class:`~gaviz.history.Update` after each applied update.
            validation_batch_size: batch size for validation (default
                ``batch_size``).
            validation_freq: validate every this many epochs.
            initial_epoch: the epoch to start at (counted from 0, as Keras
                counts for callbacks), e.g. to resume a run;
                ``BackupAndRestore`` sets it on resuming.

        Arrays are cut into micro-batches inside the graph, one ``gather``
        per micro-batch, with no ``tf.data`` pipeline (under a multi-replica
        strategy they go through ``tf.data``).

        Returns:
            A :class:`~gaviz.history.History`: one record per update
            (``history.loss``...) and, as Keras's, ``history.history``, a
            dict of per-epoch logs (``"loss"``, metrics, ``"val_*"``).

        Raises:
            NonFiniteUpdate: a window's loss or gradient is not finite (a
                ``FloatingPointError``). That update is not applied (the
                weights are those before it) and its window is discarded.
            TypeError, ValueError: bad data, ``epochs`` or targets.

        Whatever is raised, ``on_train_end`` is called first, and the model
        and optimizer hold the last applied update.
        """
        epochs = checks.check_positive_int("epochs", epochs)
        validation_freq = checks.check_positive_int("validation_freq", validation_freq)
        if isinstance(initial_epoch, bool) or not isinstance(initial_epoch, int) or initial_epoch < 0:
            raise ValueError(
                f"`initial_epoch` must be an integer >= 0. Received: initial_epoch={initial_epoch!r}"
            )
        updates = checks.check_callbacks(on_update)
        feed = fitting.make_feed(self, x, y, batch_size, shuffle, sample_weight)
        self._prepare(feed)
        validation = fitting.Validation.make(
            validation_data, validation_batch_size or batch_size, validation_freq
        )
        return fitting.fit(
            self, feed, range(initial_epoch + 1, epochs + 1), updates, callbacks, verbose,
            validation,
        )

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False):
        """``model.evaluate``: the compiled loss and metrics on ``x`` (no accumulation).

        The model is compiled with the trainer's loss and metrics, so this is
        Keras's own evaluation, with its arguments and return values.
        """
        return self.model.evaluate(
            x, y, batch_size=batch_size, verbose=verbose, sample_weight=sample_weight,
            steps=steps, callbacks=callbacks, return_dict=return_dict,
        )

    def _prepare(self, feed):
        """Builds model, losses, metrics and state on the first micro-batch, and
        checks its targets.

        Skipped for data whose element spec was already checked: the eager
        forward pass costs as much as a few windows of a small model.
        """
        if self._built and feed.element_spec == self._checked_spec:
            return
        first = feed.first()
        x, y, sample_weight = _unpack(first)
        with _tensorflow.native_log_filtered():  # e.g. float16's fallback log on some CPUs
            y_pred = self.model(x, training=False)
        if not self._built:
            if not self.model.trainable_variables:
                raise ValueError("`model` has no trainable variables: nothing to train.")
            self._build()
        self.objective.build(y, y_pred)
        with self.strategy.scope():
            # Keras's own build of compiled metrics and loss trackers (their
            # variables must exist before the graph is traced).
            self.model._symbolic_build(data_batch=tuple(first))
        self._checked_spec = feed.element_spec


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
        return tuple(element)
    x, y = element
    return x, y, None
