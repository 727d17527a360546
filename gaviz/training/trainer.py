"""The exact gradient-accumulation trainer: what a user constructs and calls.

The trainer checks its arguments, compiles the model, owns the state
(:mod:`gaviz.training.loop.state`), builds its window loop from its parts and hands
``fit`` (:mod:`gaviz.training.fit.fitting`) what it trains. The graph code one call
runs is in :mod:`gaviz.training.loop.window_loop`: windows of micro-steps
(:mod:`gaviz.training.loop.forward_backward`), each finished and applied
(:mod:`gaviz.training.window.window_cycle`); the arithmetic is in :mod:`gaviz.training.window.arithmetic` and
:mod:`gaviz.training.window.rules`.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import tensorflow as tf

from gaviz import _keras, _tensorflow
from gaviz.training.cached import choice as cached_choice
from gaviz.training.cached.cached_window import CachedWindow, Window
from gaviz.training.cached.kept import spec_of
from gaviz.training.cached.store import KeptStore
from gaviz.training.data import feeds, preprocessing
from gaviz.training.fit import batch_layers, call_size, checks, compiling, fitting, validation
from gaviz.training.fit.history import History, Update
from gaviz.training.loop import overlap
from gaviz.training.loop.forward_backward import ForwardBackward, WeightPenalty, unpack
from gaviz.training.loop.state import TrainerState
from gaviz.training.loop.window_loop import WindowLoop
from gaviz.training.loss import added_loss, row_means
from gaviz.training.loss.objective import NORMALIZATIONS, Objective, check_loss
from gaviz.training.loss.own_loss import OwnLoss
from gaviz.training.verify import verification
from gaviz.training.verify.runs import verification_runs
from gaviz.training.window import rules
from gaviz.training.window.tail import POLICIES, Tail
from gaviz.training.window.window_cycle import WindowCycle

_LOG = logging.getLogger("gaviz")


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
            A model that overrides ``compute_loss`` trains with its own,
            which must be a mean over the batch's rows (``gaviz.training.loss.own_loss``
            says why; one that is not is refused); one that overrides
            ``train_step`` is refused, with how to keep it and accumulate
            inside it with ``gaviz.Accumulator``. A model compiled without
            a loss whose layers add it with ``add_loss`` (Keras's endpoint
            layer pattern) trains on what they add, which must be a mean
            over the batch's rows (``gaviz.training.loss.added_loss``; one that is not is
            refused), and may be given inputs alone (``fit(x)``).
        accumulation_steps: micro-batches per update: an int >= 1, or a
            callable ``epoch -> int`` (epochs count from 1) for a schedule
            such as a batch-size warm-up. Read once per epoch (a window never
            changes size while it fills); k is a graph value, so a new k
            retraces nothing; ``history.accumulation_steps`` records each
            update's k.
        tail: what happens to a partial window at the end of an epoch:
            ``"flush"`` applies it, normalized by its own sample count;
            ``"drop"`` discards it; ``"carry"`` continues it into the next epoch.
        normalize: what the window's summed loss is divided by (default:
            what the loss's ``reduction`` says): ``"samples"``, its number of
            unmasked loss elements (Keras's ``sum_over_batch_size`` on the big
            batch); ``"weights"``, its total sample weight, e.g. the number of
            real tokens when the weights mask padding (the fix Hugging Face
            adopted for token-level losses); ``"sum"``, nothing.
        jit_compile: ``"auto"`` (default), ``True`` or ``False``: compile
            with XLA. On arrays (``fit(x, y)``) the whole graph call is one
            XLA program, which on a small model removes most of what a window
            costs beyond its arithmetic (benchmarks/bench_dispatch.py); on a
            dataset, whose iterator XLA cannot compile, each micro-step is.
            ``"auto"`` compiles calls on arrays where every layer has XLA
            kernels (Keras's rule, ``model_supports_jit``), XLA is not
            slower on the device (no convolution on a CPU) and the trainable
            weights take at most 16 MiB (XLA's peak holds more copies of
            them; a small model is where it pays), once the trainer has run
            8192 micro-steps in plain graphs (a short run does not pay XLA's
            compile; ``compiling.AUTO_XLA_AFTER_MICRO_STEPS``), and leaves
            a dataset's micro-steps to TensorFlow (measured faster); for a
            model built at the first ``fit``, it is decided then. Keras's
            own ``"auto"`` differs on a CPU: it leaves XLA off on a machine
            without a GPU, where gaviz's whole call on arrays measured faster
            with it. ``trainer.jit_compile`` says what was chosen, and so
            does the ``"gaviz"`` logger at INFO.
            ``True`` forces it: on a CPU, for a model with convolutions, whose
            gradients XLA runs tens of times slower inside a loop
            (jax-ml/jax#12868), only the micro-steps, with a warning.
            ``False`` turns it off. XLA still keeps one micro-batch's
            activations at a time, but its peak holds copies of the weights
            (benchmarks/bench_memory.py): where memory is the constraint,
            pass ``jit_compile=False``.
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
            doubled while calls take under 0.1 s (on one worker; with several,
            each would time its own calls, so it stays one). Callbacks see
            every update either way, after the call that applied it.
        metrics: what ``compile`` takes (default: the model's compiled
            metrics): Keras metric objects or names, updated on every
            micro-batch, so their epoch values are the big batch's.
        loss_weights: as ``compile`` takes them (default: the compiled ones).
        cached_window: ``"auto"`` (default): a compiled loss whose rows
            couple (in-batch negatives, Circle, Dice) or that is not one value
            per row trains with the cached window (``gaviz.training.cached``:
            the loss once on the window's outputs, one more forward pass per
            micro-batch), said once; ``True``: the cached window for any
            compiled loss; ``False``: such a loss is refused by name.

    Raises:
        TypeError, ValueError: an argument is not what is described above.

    Subclassing:
        The window is data: set the class attribute ``rule`` to a
        :class:`gaviz.Rule` (what a micro-batch contributes, the divisor,
        the weight penalty, clipping, where it is reduced across replicas,
        what the next window starts from...). The pitfall gallery is the
        exact trainer with other rules and settings
        (:mod:`gaviz.gallery.pitfalls`). A rule's functions run inside the
        graph, in replica context, with AutoGraph off, as in Keras's
        ``train_step``: a decision on a tensor is ``tf.cond`` (or
        ``keras.ops.cond``), not a Python ``if``.
    """

    #: The window's arithmetic (gaviz.training.window.rules.EXACT: sum, then divide once).
    rule: rules.Rule = rules.EXACT

    def __init__(
        self,
        model,
        optimizer=None,
        loss=None,
        accumulation_steps: int | Callable[[int], int] | None = None,
        tail: str = "flush",
        normalize: str | None = None,
        jit_compile: bool | str = "auto",
        strategy: tf.distribute.Strategy | None = None,
        windows_per_call: int | str = "auto",
        metrics=None,
        loss_weights=None,
        cached_window: bool | str = "auto",
    ):
        super().__init__(name="accumulation_trainer")
        _keras.check_version()
        checks.check_model(model)
        self.strategy = checks.check_strategy(strategy, model.variables, checks.MODEL_UNDER_STRATEGY)
        if optimizer is not None:
            checks.check_optimizer(optimizer)
        self.tail = checks.check_one_of("tail", tail, POLICIES)
        if normalize is not None:
            checks.check_one_of("normalize", normalize, NORMALIZATIONS)
        self.schedule = checks.Schedule(accumulation_steps)
        self.accumulation_steps = self.schedule.accumulation_steps
        self.windows_per_call = checks.check_windows_per_call(windows_per_call)
        self.call_size = call_size.CallSize(
            self.windows_per_call, call_size.worker_count(self.strategy)
        )
        self.model = model
        self._jit_compile_asked = checks.check_one_of("jit_compile", jit_compile,
                                                      ("auto", True, False))
        self.cached_window = checks.check_one_of("cached_window", cached_window,
                                                 cached_choice.CHOICES)
        batch_layers.warn_batch_dependent(model, "k" if self.schedule.varies
                                          else self.accumulation_steps)
        self._compile(optimizer, loss, normalize, metrics, loss_weights)
        self.state = TrainerState(self.strategy)
        #: Whether a window may be carried into the next graph call (its sums
        #: then live in the state).
        self._carries = Tail(self.tail).carries or self.rule.carries_sums
        #: Micro-steps run at once (``gaviz.training.loop.overlap``): decided
        #: on the first micro-batch, before the window loop's first trace.
        self.micro_steps_in_flight = None
        #: The trained variables (by index) whose windows hold occurrences
        #: (their gradients arrive as tf.IndexedSlices): found on the first
        #: micro-batch, before the window loop's first trace.
        self._sparse = None
        # Why windows are cached (None: summed), a micro-batch's spec, a carried window.
        self._cached, self._micro_spec, self._kept = None, None, None
        self._built, self._checked_spec, self._trained = False, None, []
        self._state_watched = False  # layers updating their own state: checked once
        self._build_when_built()

    def _window_loop(self) -> WindowLoop:
        """The graph code, built from its parts."""
        forward_backward = ForwardBackward(self.model, self.optimizer, self.objective,
                                           self.own_loss)
        makes_loss = self.own_loss or self.objective
        cycle = WindowCycle(
            self.optimizer, forward_backward.variables, self.rule,
            divides=makes_loss.normalize != "sum",
            # A model's own compute_loss holds the weight penalty (as Keras's does).
            penalty=None if makes_loss.includes_weight_penalty else WeightPenalty(self.model),
            skipped_windows=self.state.skipped_windows,
        )
        sparse = self._sparse or frozenset()
        xla = compiling.xla_mode(self.model, self._jit_compile_asked,
                                 gathers=bool(sparse) or bool(self._cached))
        #: Whether XLA compiles the window loop or its micro-steps (what
        #: ``jit_compile="auto"`` chose, as Keras's ``model.jit_compile`` says).
        self.jit_compile = xla != "off"
        _LOG.info("gaviz: jit_compile=%r for %s: XLA %s", self._jit_compile_asked,
                  self.model.name, compiling.XLA_MODES[xla].says)
        return WindowLoop(
            forward_backward, cycle, self.state, self.strategy, self.rule, Tail(self.tail),
            loss_tracker=_keras.loss_tracker(self.model), capacity=self.call_size.capacity,
            xla=xla, micro_steps_in_flight=self.micro_steps_in_flight or 1, sparse=sparse,
            window=self._cached and CachedWindow(
                self.model, self.optimizer, self._micro_spec, forward_backward.reach,
                self._kept, sparse, jit=xla != "off"),
        )

    def _compile(self, optimizer, loss, normalize, metrics, loss_weights):
        """Compiles the model with the trainer's optimizer, loss and metrics."""
        check_loss(loss)
        owner = checks.overridden(self.model, "compute_loss")
        compiled = compiling.compile_for_trainer(
            self.model, self.strategy, optimizer, loss, metrics, loss_weights,
            loss_required=owner is None and not added_loss.may_add_losses(self.model),
        )
        checks.check_optimizer(compiled.optimizer)
        self.optimizer, self.loss = compiled.optimizer, compiled.loss
        self.objective = Objective(
            _keras.compile_loss(self.model), getattr(self.model, "output_names", None),
            normalize,
        )
        self.own_loss = None if owner is None else OwnLoss(self.model, owner)
        #: Whether the loss is what the model's layers add with add_loss alone
        #: (compiled without a loss): then fit takes data without targets.
        self._added_loss_only = self.objective.compile_loss is None and owner is None
        #: Whether fit needs targets: not for a loss the model makes itself (its
        #: add_loss, or its compute_loss, which may make its own targets).
        self._needs_targets = self.objective.compile_loss is not None and owner is None

    def _build_when_built(self, after_restore: bool = True):
        """Builds what needs the model's weights, if the model has them, then
        the window loop: made again each time, since what it compiles
        (``jit_compile="auto"``) depends on the weights."""
        if self.model.built and self.model.trainable_variables:
            self._build(after_restore)
        self.window_loop = self._window_loop()

    def _build(self, after_restore: bool = True):
        """Creates optimizer slots, and the carried window's sums if needed
        (``after_restore``: first check that no checkpoint was restored before)."""
        if after_restore and int(self.state.micro_step.numpy()) > 0:
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
        self.state.build(variables, carries=self._carries)
        if not self.optimizer.built:  # a LossScaleOptimizer built twice makes its state twice
            with self.strategy.scope():
                self.optimizer.build(variables)
        self._built, self._trained = True, [id(v) for v in variables]

    def _follow_compile(self):
        """After ``model.compile``, trains what ``Model.fit`` would: the optimizer,
        loss and metrics compile was given, and the trainable variables then.

        Raises:
            ValueError: the trainable variables changed without a new
                ``compile`` (Model.fit would keep training the old ones), or a
                window carried into the next epoch is open.
        """
        model = self.model
        recompiled = (model.optimizer is not self.optimizer
                      or _keras.compile_loss(model) is not self.objective.compile_loss)
        if recompiled:
            if int(self.state.micro_steps_in_window.numpy()) > 0:
                raise ValueError(
                    "`model` was compiled again while a window carried into the next epoch "
                    f"holds {int(self.state.micro_steps_in_window.numpy())} micro-batches "
                    "(tail=\"carry\"): they were summed for the old optimizer and loss. "
                    "Recompile between fits of a trainer with tail=\"flush\" or \"drop\"."
                )
            self._compile(None, None, self.objective.requested, None, None)
            self.state.window.forget()
            self._built, self._checked_spec, self._trained = False, None, []
            self._sparse, self._cached = None, None
            self._build_when_built(after_restore=False)
        elif self._built and [id(v) for v in model.trainable_variables] != self._trained:
            raise ValueError(
                "`model`'s trainable variables changed since it was compiled (a layer's "
                "`trainable` was set): Model.fit would go on training the old ones until "
                "model.compile is called again. Call model.compile(...) after changing "
                "`trainable`, as Keras asks, then fit."
            )

    # ------------------------------------------------------------ properties

    micro_step = property(lambda self: self.state.micro_step, doc="Micro-batches consumed.")
    micro_steps_in_window = property(
        lambda self: self.state.micro_steps_in_window, doc="Micro-batches of a carried window."
    )
    skipped_windows = property(
        lambda self: self.state.skipped_windows, doc="Windows a loss-scaling optimizer skipped."
    )
    carried_sums = property(
        lambda self: self.state.window.gradient_sums,
        doc="A carried window's gradient sums, per replica.",
    )

    @property
    def tracing_count(self) -> int:
        """How many times the window functions were traced (1 after any number of
        windows of datasets with one element structure)."""
        return self.window_loop.tracing_count

    @property
    def num_replicas(self) -> int:
        """Replicas training in sync (1 without distribution)."""
        return self.strategy.num_replicas_in_sync

    def accumulation_steps_for(self, epoch: int) -> int:
        """k in ``epoch`` (counted from 1): the int, or the schedule's value."""
        return self.schedule(epoch)

    def effective_batch_size(self, micro_batch_size: int, epoch: int = 1) -> int:
        """Samples in a full window: ``micro_batch_size * k * num_replicas``.

        ``micro_batch_size`` is per replica; ``epoch`` matters for a schedule of k.
        """
        micro_batch_size = checks.check_positive_int("micro_batch_size", micro_batch_size)
        return micro_batch_size * self.accumulation_steps_for(epoch) * self.num_replicas

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
        """What a window is divided by: ``"samples"``, ``"weights"`` or ``"sum"``
        (``"samples"``, its rows, for a model's own compute_loss)."""
        return (self.own_loss or self.objective).normalize

    def fit(self, x, y=None, batch_size: int | None = None, epochs: int = 1, verbose="auto",
            callbacks=None, validation_data=None, shuffle: bool = True, sample_weight=None,
            on_update: Callable[[Update], None] | Iterable[Callable[[Update], None]] | None = None,
            validation_batch_size: int | None = None, validation_freq: int | list = 1,
            initial_epoch: int = 0, class_weight=None, validation_split: float = 0.0,
            validation_steps: int | None = None, steps_per_epoch: int | None = None,
            verify: bool = False) -> History:
        """Trains for ``epochs`` epochs, one update per window of micro-batches.

        Takes ``Model.fit``'s arguments, with ``batch_size`` the size of a
        micro-batch; the numbers equal ``Model.fit(batch_size=k * b,
        shuffle=False)`` on the same data. Where they differ from Keras's:

        Args:
            x: a ``tf.data.Dataset``, a ``keras.utils.PyDataset`` or a Python
                generator of micro-batches ``(x, y)`` or ``(x, y,
                sample_weight)``, iterated afresh each epoch; or arrays, cut
                into micro-batches inside the graph.
            y, sample_weight: targets and per-row weights, when ``x`` is
                arrays (no ``y`` for a model whose layers add its loss).
            batch_size: the micro-batch size, when ``x`` is arrays (default 32).
            verbose: 0 silent; 1 or ``"auto"`` a progress bar stepping per
                update; 2 one line per epoch.
            callbacks: Keras callbacks; batch events once per update (once per
                graph call when several windows run per call and no callback
                of yours listens).
            validation_data: evaluated with ``model.evaluate`` (batches of
                ``validation_batch_size``; by default, for arrays ``x``, the
                effective batch ``k * batch_size``, as ``Model.fit(batch_size=k
                * b)`` validates: masked and per-output entries depend on it;
                ``validation_steps`` of them if given), every
                ``validation_freq`` epochs or at the epochs a list of it holds.
                ``validation_split`` takes the last fraction of arrays
                instead, before shuffling, as Keras does.
            class_weight: as Keras's, turned into per-row weights by Keras's
                own rule (arrays with one ``y``, datasets, PyDatasets).
            steps_per_epoch: updates per epoch (windows, each
                ``accumulation_steps`` micro-batches), as Keras's counts steps
                of its big batch: ``Model.fit(batch_size=k * b,
                steps_per_epoch=n)`` is ``fit(batch_size=b, steps_per_epoch=n)``.
                As in Keras, the next epoch goes on where the last one stopped
                in the data, and an epoch ends early (with a warning) when a
                pass over finite data ends; needed for a dataset that repeats
                forever.
            shuffle: shuffle the rows of arrays each epoch (numpy's generator,
                which ``keras.utils.set_random_seed`` seeds); a dataset keeps
                its own order.
            on_update: callables given each applied :class:`~gaviz.training.fit.history.Update`.
            verify: first run :meth:`verify` on the data (arrays or a
                ``tf.data.Dataset``), and train only if gaviz equals Model.fit
                on this model.

        Returns:
            A :class:`~gaviz.training.fit.history.History`: a record per update, and
            ``history.history`` as Keras's.

        Raises:
            NonFiniteUpdate: a window's loss or gradient is not finite; that
                update is not applied and its window is discarded.
            NotExact: with ``verify=True``, gaviz differs from Model.fit on
                this model (its ``verification`` says where and why).
            TypeError, ValueError: bad data, ``epochs`` or targets.

        Whatever is raised, ``on_train_end`` is called first, and the model
        and optimizer hold the last applied update.
        """
        epochs = checks.check_int_at_least("epochs", epochs, 0)  # 0: nothing, as Keras
        validation_freq = checks.check_validation_freq(validation_freq)
        initial_epoch = checks.check_int_at_least("initial_epoch", initial_epoch, 0)
        updates = checks.check_on_update(on_update)
        checks.check_backups(callbacks, self._carries)
        if verify:
            verification.required(self.verify(x, y, batch_size, sample_weight, class_weight),
                                  verbose)
        self._follow_compile()
        data = feeds.FitData(x, y, batch_size, shuffle, sample_weight, class_weight,
                             validation_split, validation_data, steps_per_epoch)
        feed = feeds.make_feed(data, self.model, self.strategy, targets=self._needs_targets)
        self._prepare(feed)
        k = self.accumulation_steps_for(initial_epoch + 1)
        validator = validation.Validation.make(
            feed.validation_data,
            validation_batch_size or feed.big_batch_size(k),
            validation_freq,
            validation_steps and checks.check_positive_int("validation_steps", validation_steps),
            targets=self._needs_targets,
            raw=preprocessing.preprocess_samples(self.model) is not None,
        )
        state_watch = None
        if not self._state_watched:
            state_watch, self._state_watched = batch_layers.StateWatch(self.model), True
        training = fitting.Training(
            self.model, self.optimizer, self.window_loop, self.call_size,
            self.schedule, Tail(self.tail), self.state.micro_steps_in_window,
        )
        return fitting.fit(training, feed, range(initial_epoch + 1, epochs + 1), updates,
                           callbacks, verbose, validator, state_watch)

    def verify(self, x, y=None, batch_size: int | None = None, sample_weight=None,
               class_weight=None, micro_batch_size: int | None = None):
        """Is the trainer exact on this model? Trains two windows and a partial
        one with gaviz, and the same rows with Keras's own ``Model.fit`` at the
        big batch, from the same weights and optimizer state; compares every
        variable, optimizer variable, the loss and each metric; names the cause
        of any difference (``gaviz.training.verify.verification``). The model,
        optimizer, metrics, random states and this trainer's counters are put
        back afterwards, bit for bit.

        Args:
            x, y, sample_weight, class_weight: ``fit``'s data: arrays (or dicts,
                strings for a KerasHub task's preprocessor) or a
                ``tf.data.Dataset`` of micro-batches, whose first rows are read once.
            batch_size: the micro-batch the run will use (default: the
                dataset's, or 32).
            micro_batch_size: the micro-batch to verify at (default:
                ``ceil(batch_size / k)``, so that Model.fit's batch of k of them
                is about one micro-batch of the run and fits where it fits).

        Returns:
            A :class:`gaviz.Verification`: ``equal``, the
            gaps, the causes and what to do; shown as a table in a notebook.
        """
        k = self.accumulation_steps_for(1)
        m, sample = verification.plan(x, y, sample_weight, batch_size, micro_batch_size, k)
        runs, attributes = verification_runs(self, k, m, class_weight)
        return verification.verify(self.model, self.optimizer, k, m, sample, runs,
                                   self.state.variables, attributes)

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
        checks its targets, then (once per trainer or compile) the loss the model
        makes itself.

        Skipped for data whose element spec was already checked: the eager
        forward pass costs as much as a few windows of a small model.
        """
        if self._built and feed.element_spec == self._checked_spec:
            return
        first = feed.first()
        x, y, sample_weight = unpack(first)
        with _tensorflow.native_log_filtered():  # e.g. float16's fallback log on some CPUs
            y_pred = self.model(x, training=False)
        if not self._built:
            if not self.model.trainable_variables:
                raise ValueError("`model` has no trainable variables: nothing to train.")
            self._build_when_built()
        if self.own_loss is None and not self._cached:  # an own compute_loss makes its loss
            self._choose_window(feed, first, y_pred)
        if self._checked_spec is None:  # once per trainer (or compile)
            self._check_own_losses(feed)
        with self.strategy.scope():
            # Keras's own build of compiled metrics and loss trackers (their
            # variables must exist before the graph is traced).
            _keras.symbolic_build(self.model, tuple(first))
        self._checked_spec = feed.element_spec
        if self._sparse is None:  # before the loop's first trace
            self._find_sparse_gradients(first)
        if self.micro_steps_in_flight is None:  # before the loop's first trace
            self.micro_steps_in_flight = overlap.micro_steps_in_flight(
                self.model, int(tf.nest.flatten(x)[0].shape[0]),
                compiling.weight_bytes(self.model), exact_steps=self.rule == rules.EXACT,
                replicas=self.strategy.num_replicas_in_sync,
            )
        if (self.window_loop.micro_steps_in_flight != self.micro_steps_in_flight
                or self.window_loop.sparse != self._sparse
                or isinstance(self.window_loop.window, CachedWindow) != bool(self._cached)):
            self.window_loop = self._window_loop()

    def _choose_window(self, feed, first, y_pred):
        """Resolves the compiled loss on the first micro-batch, and, once, chooses
        how windows are made: summed, or the cached window where the loss couples
        rows or is not one value per row (``cached_window``)."""
        self._cached = cached_choice.reason(
            self.cached_window, self.schedule.accumulates(),
            build=lambda: self.objective.build(unpack(first)[1], y_pred),
            check=lambda: self._checked_spec is None and self.objective.unknown_terms() and (
                self.objective.check_rows(row_means.probe_batch(
                    feed.probe(row_means.PROBE_ROWS), self.model))),
            rule=self.rule, strategy=self.strategy, stacklevel=5)
        if self._cached:
            self._micro_spec = tuple(spec_of(part) for part in unpack(first))
            if self._carries and self._kept is None:
                self._kept = KeptStore(self._micro_spec, Window)
            self.window_loop = self._window_loop()

    def _find_sparse_gradients(self, first):
        """Which variables' windows hold occurrences: those a micro-step gives
        ``tf.IndexedSlices``, unless the weight penalty reaches them (dense then)."""
        loop = self.window_loop
        found = loop.window.sparse_gradients(tuple(first), self.strategy)
        self._sparse = found - loop.cycle.penalized()
        if self._sparse and self.state.carries:
            self.state.window.keep_occurrences(self.model.trainable_variables, self._sparse)
        if self._sparse and self.strategy.num_replicas_in_sync > 1:
            self.call_size.hold_at_one(self.windows_per_call, self.num_replicas, stacklevel=4)

    def _check_own_losses(self, feed):
        """Checks the loss, on rows drawn from across the data: a compiled loss
        that is not one of Keras's known per-row losses (for coupled rows), the
        model's compute_loss and what its layers add with add_loss. Refused
        where the trainer cannot take it exactly, said (by name) where
        accumulation cannot be exact."""
        accumulates = self.schedule.accumulates()
        if self.own_loss is None and not added_loss.may_add_losses(self.model):
            return
        probe = feed.probe(row_means.PROBE_ROWS)
        added = (added_loss.find(self.model, probe[0]) if added_loss.may_add_losses(self.model)
                 else None)
        if self._added_loss_only:
            added_loss.check_only_loss(added)
            return
        if self.own_loss is not None:
            self.own_loss.check(row_means.probe_batch(probe, self.model))
        fixed = (self.own_loss is not None or bool(self._cached)
                 or self.objective.fixed_count_per_row(feed.element_spec))
        added_loss.warn_where_inexact(added, accumulates, fixed, self.objective.divides_by,
                                      stacklevel=4)
