"""The graph code one call runs: windows of micro-steps, their sums in loop tensors.

A window pulls up to k micro-batches from its source, adds each one's
summed gradients into float32 running sums (loop tensors, not variables),
then lives the window's life (:mod:`gaviz.training.window_cycle`, the same as
:class:`gaviz.Accumulator`'s): reduced across replicas once, finished, judged,
applied or skipped, emptied (or kept open for the next call).

:class:`WindowLoop` is built from its parts, as Keras builds its looped
train function from a step function: the micro-step
(:class:`gaviz.training.forward_backward.ForwardBackward`), the window's cycle
(:class:`gaviz.training.window_cycle.WindowCycle`), the state
(:class:`gaviz.training.state.TrainerState`), the strategy, the :class:`Hooks` and
the :class:`gaviz.training.rules.Rule`. It holds no trainer.
"""

from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from gaviz import _keras
from gaviz.training import rules, sources, window, window_cycle
from gaviz.training.forward_backward import ForwardBackward, clip_mean_gradient, unpack
from gaviz.training.state import TrainerState
from gaviz.training.tail import Tail
from gaviz.training.window import WindowResult, WindowSums
from gaviz.training.window_cycle import APPLIED, WindowCycle, when


def keep(sums: WindowSums) -> WindowSums:
    """Exact ``on_micro_batch``: a micro-batch adds what its backward pass gave."""
    return sums


def all_reduce(sums: WindowSums) -> WindowSums:
    """Exact ``reduce_window``: every sum across replicas, in one batched all-reduce."""
    return window_cycle.all_reduce(sums)


def start_afresh(sums: WindowSums) -> WindowSums:
    """Exact ``next_window``: the window after a closed one starts from zeros."""
    return tf.nest.map_structure(tf.zeros_like, sums)


class Hooks(NamedTuple):
    """Where a window's state may be changed, each a function run inside the
    graph, in replica context (see ``AccumulationTrainer``'s Subclassing).

    Attributes:
        on_micro_batch: ``WindowSums -> WindowSums``, after a micro-batch's
            backward pass, before it is added to the window.
        reduce_window: ``WindowSums -> WindowSums``, once per window: its
            sums across replicas.
        next_window: ``WindowSums -> WindowSums``, after a window closes:
            what the next one starts from.
    """

    on_micro_batch: Callable[[WindowSums], WindowSums] = keep
    reduce_window: Callable[[WindowSums], WindowSums] = all_reduce
    next_window: Callable[[WindowSums], WindowSums] = start_afresh


#: How XLA compiles a loop (``jit_compile``): not at all, each micro-step,
#: or the whole call on arrays (micro-steps, updates and the window loop).
class XlaMode(NamedTuple):
    """What XLA compiles in one of :data:`XLA_MODES`."""

    whole_call: bool  #: each graph call on arrays, as one program
    micro_steps: bool  #: each micro-step (of a dataset, and of arrays unless whole)
    says: str  #: the mode in words, for the log


#: ``jit_compile="auto"`` (mode ``"arrays"``) runs plain graphs until the
#: trainer has run this many micro-steps, and compiles the whole call on
#: arrays from the next pass on: a short run does not pay XLA's compile,
#: which on the dispatch benchmark's MLP cost as much as about this many
#: micro-steps save (1.2 s against 0.14 ms each, 2026-11-27, TensorFlow 2.21.0,
#: 2 CPU cores). A count, not a time, so that a run's numbers do not depend
#: on the machine's speed.
AUTO_XLA_AFTER_MICRO_STEPS = 8192

XLA_MODES = {
    "off": XlaMode(False, False, "off (plain TensorFlow graphs)"),
    "per_micro_batch": XlaMode(False, True, "compiles each micro-step"),
    "whole_call": XlaMode(True, True, "compiles each graph call on arrays whole, and each "
                                      "micro-step of a dataset"),
    "arrays": XlaMode(True, False, "compiles each graph call on arrays whole once the "
                                   f"trainer has run {AUTO_XLA_AFTER_MICRO_STEPS} "
                                   "micro-steps (before, and a dataset's micro-steps: no XLA)"),
}


class WindowLoop:
    """The graph functions one call runs, one for a dataset's iterator and
    one for arrays: each runs up to ``max_windows`` windows per call.

    Args:
        forward_backward: one micro-batch's forward and backward pass.
        cycle: a window's life once its micro-batches are added.
        state: counters, the array cursor and a carried window.
        strategy: the ``tf.distribute.Strategy`` the loop runs under.
        hooks: the three :class:`Hooks`.
        rule: the window's arithmetic (:data:`gaviz.training.rules.EXACT`).
        tail: ``"flush"``, ``"drop"`` or ``"carry"`` (a window open at the
            end of the data is applied, discarded, or kept for the next call).
        loss_tracker: Keras's loss tracker (a ``keras.metrics.Mean``), given
            each applied window's loss weighted by its samples.
        capacity: the most windows one call may run (XLA needs a fixed
            number of result rows).
        xla: one of :data:`XLA_MODES`.
    """

    def __init__(self, forward_backward: ForwardBackward, cycle: WindowCycle,
                 state: TrainerState, strategy, hooks: Hooks = Hooks(),
                 rule: rules.Rule = rules.EXACT, tail: str = "flush", loss_tracker=None,
                 capacity: int = 1, xla: str = "off"):
        self.forward_backward, self.cycle = forward_backward, cycle
        self.state, self.strategy, self.hooks, self.rule = state, strategy, hooks, rule
        self.tail, self.loss_tracker, self.capacity = tail, loss_tracker, capacity
        self.xla = xla
        #: Micro-steps run at once (:mod:`gaviz.training.overlap`): None until
        #: the trainer decides it on the first micro-batch, before any trace.
        self.micro_steps_in_flight = None
        #: Whether XLA compiles a whole call on arrays (every micro-step,
        #: update and the window loop in one program), not only each micro-step.
        self.whole_call_compiled = XLA_MODES[xla].whole_call
        #: Micro-steps the trainer runs in plain graphs before XLA compiles
        #: its calls on arrays (:data:`AUTO_XLA_AFTER_MICRO_STEPS` for "auto").
        self.xla_after_micro_steps = AUTO_XLA_AFTER_MICRO_STEPS if xla == "arrays" else 0
        # autograph=False, as Keras's train functions (do_not_convert): the
        # graph code says its loops and conditions itself, and a model's code
        # runs as it would in Model.fit. AutoGraph would read gaviz's source
        # files again to convert them, and run a function as-is when that fails.
        self.iterator_windows = tf.function(self._iterator_windows, autograph=False)
        self._traced = {}  # the traced graph per kind of iterator: calls skip matching
        self.array_windows = tf.function(
            self._array_windows_whole if self.whole_call_compiled else self._array_windows,
            reduce_retracing=True, jit_compile=self.whole_call_compiled, autograph=False,
        )
        # Before XLA's turn ("auto"): the same calls as plain graphs.
        self.plain_array_windows = tf.function(
            self._array_windows, reduce_retracing=True, autograph=False,
        )
        self.compiled_micro_sums = (
            tf.function(forward_backward.sums, jit_compile=True, autograph=False)
            if XLA_MODES[xla].micro_steps else forward_backward.sums
        )

    def start(self, epoch):
        """``call(max_windows, accumulation_steps) -> (reports, done)``, which runs
        up to ``max_windows`` windows of ``epoch``'s next micro-batches (a
        feed's pass: :class:`~gaviz.training.sources.IteratorPass` or
        :class:`~gaviz.training.sources.ArrayPass`)."""
        if isinstance(epoch, sources.ArrayPass):
            self.state.array_cursor.assign(0)
            function = self.array_windows if self.xla_now() else self.plain_array_windows
            return lambda max_windows, k: function(
                epoch.arrays, epoch.order, epoch.batch_size, epoch.rows, max_windows, k)
        function = self._traced_for(epoch.iterator)
        return lambda max_windows, k: function(epoch.iterator, max_windows, k)

    def _traced_for(self, iterator):
        """The traced graph for ``iterator``: called directly, it skips matching
        the iterator against every trace (an epoch's iterator is of the same
        kind as the last one's)."""
        kind = tf.type_spec_from_value(iterator)
        if kind not in self._traced:
            self._traced[kind] = self.iterator_function(iterator)
        return self._traced[kind]

    def iterator_function(self, iterator):
        """The traced graph one call runs for ``iterator``:
        ``(iterator, max_windows, accumulation_steps) -> (reports, done)``."""
        return self.iterator_windows.get_concrete_function(
            iterator, tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int64)
        )

    def xla_now(self) -> bool:
        """Whether a pass over arrays starting now runs as one XLA program per
        call: with XLA's whole call, once the trainer has run
        ``xla_after_micro_steps`` micro-steps."""
        return self.whole_call_compiled and (
            self.xla_after_micro_steps == 0
            or int(self.state.micro_step.numpy()) >= self.xla_after_micro_steps)

    @property
    def tracing_count(self) -> int:
        """How many times the window functions were traced."""
        functions = (self.iterator_windows, self.array_windows, self.plain_array_windows)
        return sum(f.experimental_get_tracing_count() for f in functions)

    def _iterator_windows(self, iterator, max_windows, accumulation_steps):
        # XLA cannot compile an iterator's ops: with jit_compile, the micro-step is.
        source = sources.IteratorSource(iterator, self.micro_steps_in_flight or 1)
        return self._windows(source, self.compiled_micro_sums, max_windows, accumulation_steps)

    def _array_windows_whole(self, arrays, order, batch_size, rows, max_windows,
                             accumulation_steps):
        """:meth:`_array_windows` as one XLA program."""
        return self._array_windows(arrays, order, batch_size, rows, max_windows,
                                   accumulation_steps, whole=True)

    def _array_windows(self, arrays, order, batch_size, rows, max_windows, accumulation_steps,
                       whole: bool = False):
        source = sources.ArraySource(arrays, order, self.state.array_cursor, batch_size, rows,
                                     self.micro_steps_in_flight or 1)
        # Inside one XLA program already, the micro-step is not compiled
        # again (XLA cannot nest the two); before XLA's turn, not at all.
        micro_sums = self.forward_backward.sums if whole else self.compiled_micro_sums
        return self._windows(source, micro_sums, max_windows, accumulation_steps, whole)

    def _windows(self, source, micro_sums, max_windows, accumulation_steps, whole=False):
        """Runs up to ``max_windows`` windows, each micro-batch through
        ``micro_sums``; returns ``(reports, done)``: one packed WindowResult
        per window, the first ``done`` of them filled.

        Stops early when the data runs out or a due window is not finite
        (so the error is raised with the weights of the update before it).
        """
        state, strategy = self.state, self.strategy
        sums = strategy.run(state.window.read, args=(self.forward_backward.variables(),))
        steps = state.micro_steps_in_window.read_value()

        def more(go_on, done, sums, steps, reports):
            return tf.logical_and(go_on, done < max_windows)

        def next_window(go_on, done, sums, steps, reports):
            sums, steps, result = self._window(source, micro_sums, sums, steps, accumulation_steps)
            with tf.name_scope("report"):
                reports = reports.write(done, result.pack())
            stopped = tf.logical_and(result.due, tf.logical_not(result.finite))
            go_on = tf.logical_not(tf.logical_or(result.exhausted, stopped))
            return go_on, done + 1, sums, steps, reports

        # Windows one at a time too: the next window's sums start from
        # zeros, so without this its first micro-step could run while this
        # window's gradients are still being applied (more memory at the peak).
        _, done, sums, steps, reports = tf.while_loop(
            more, next_window,
            (tf.constant(True), tf.constant(0), sums, steps, self._reports(whole)),
            parallel_iterations=1,
        )
        if state.carries:
            strategy.run(state.window.write, args=(sums,))
        state.micro_steps_in_window.assign(steps)
        return reports.stack(), done

    def _reports(self, whole: bool):
        """A TensorArray for one packed WindowResult per window of a call
        (``whole``: in one XLA program)."""
        fields = [len(WindowResult._fields)]
        if whole:  # XLA needs a fixed size: the most windows a call runs
            return tf.TensorArray(tf.float64, self.capacity, element_shape=fields)
        return tf.TensorArray(tf.float64, 0, dynamic_size=True, element_shape=fields)

    def _window(self, source, micro_sums, sums, steps, k):
        """One window: accumulate, then its cycle (reduce, finish, judge,
        apply, empty), in the name scopes of a profile."""
        # The name scopes name the phases' ops in a profile (benchmarks/profile_dispatch.py).
        tail = Tail(self.tail)
        sums, steps, consumed, exhausted = self._accumulate(source, micro_sums, sums, steps, k)
        with tf.name_scope("all_reduce"):
            totals = self._reduce(sums)
        full = steps >= k
        closes = tail.closes(full)
        # A partial window with micro-batches is due under "flush", even if its
        # loss counts nothing (every row masked): Model.fit steps on such a batch.
        due = tail.due(full, exhausted, steps)
        with tf.name_scope("finish"):
            finished = self.cycle.finish(totals, steps, k)
            applies = tf.equal(self.cycle.judge(due, finished.finite), APPLIED)
        with tf.name_scope("update"):
            # Micro-batches up to this window's end, for a rule whose schedule reads them.
            micro_steps = self.state.micro_step + consumed if self.rule.schedule_step else None
            applied = self.cycle.apply(applies, finished.gradients, [self._pattern()],
                                       micro_steps=micro_steps, steps=steps)
        with tf.name_scope("report"):
            self.strategy.run(self._track_window, args=(applies, finished.loss, totals.rows))
            self.state.micro_step.assign_add(consumed)
            result = WindowResult(
                applied, due, finished.finite, exhausted, finished.loss, totals.sample_count,
                steps, consumed, k, totals.rows,
            )
        with tf.name_scope("close"):
            sums, steps = self._close(closes, sums, steps)
        return sums, steps, result

    def _accumulate(self, source, micro_sums, sums, steps, k):
        """Micro-steps until the window is full or the data runs out."""

        def add_micro_batch(element, sums):
            return self.strategy.run(self._replica_add, args=(element, sums, micro_sums, k))

        return source.accumulate(add_micro_batch, sums, steps, k)

    def _replica_add(self, element, sums, micro_sums, k):
        """Adds one micro-batch to this replica's running sums (no communication)."""
        rule = self.rule
        micro = rule.contribution(micro_sums(*unpack(element), k))
        if rule.clip_micro_batches:
            micro = clip_mean_gradient(micro, self.cycle.optimizer)
        if rule.apply_each_micro_batch:
            self.cycle.step(window.finish(micro.gradients, micro.normalizer), self._pattern())
        micro = self.hooks.on_micro_batch(micro)
        # Add once the whole backward pass is done. Added as each gradient
        # arrives, a new sum would be allocated while the micro-batch's
        # activations are still alive, raising the peak by the largest weight.
        with tf.control_dependencies(micro.gradients), tf.name_scope("add_to_sums"):
            return window.add(sums, micro)

    def _pattern(self) -> tuple:
        """The variables an update steps: those the loss (traced before this)
        or the weight penalty reaches, by index."""
        count = len(self.forward_backward.variables())
        return self.forward_backward.reach.pattern(count, self.cycle.penalized())

    def _reduce(self, sums):
        """The window's totals across replicas (every replica holds the same)."""
        reduced = self.strategy.run(self.hooks.reduce_window, args=(sums,))
        return self.strategy.experimental_local_results(reduced)[0]

    def _track_window(self, due, loss, rows):
        """Keras's loss tracker sees each window's loss, weighted by its samples.

        Runs in replica context, so each replica adds its share: the tracker's
        sums across replicas are the window's.
        """
        if self.loss_tracker is None:
            return
        share = tf.cast(self.strategy.num_replicas_in_sync, tf.float32)
        when(due, lambda: self.loss_tracker.update_state(loss, sample_weight=rows / share))

    def _close(self, closes, sums, steps):
        """A closed window hands its sums to ``next_window`` (and the rule's);
        an open one keeps them."""
        def close():
            return self.strategy.run(self._next_window, args=(sums,)), tf.constant(0, tf.int64)

        return close() if closes is True else tf.cond(closes, close, lambda: (sums, steps))

    def _next_window(self, sums):
        return self.cycle.empty(sums, self.hooks.next_window(sums))


#: Layers whose gradients XLA's CPU backend runs tens of times slower inside
#: a loop than outside one (a known XLA issue, jax-ml/jax#12868: inside a
#: loop body a convolution can get a layout its fast kernel does not take).
#: Measured here: a small CNN's micro-step 2.4 s in the window loop, 0.05 s alone.
_SLOW_IN_A_CPU_XLA_LOOP = (
    keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
    keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose,
    keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D,
    keras.layers.SeparableConv1D, keras.layers.SeparableConv2D,
)


#: ``jit_compile="auto"`` compiles the whole call only for a model whose
#: trainable weights take at most this many bytes. XLA's program holds more
#: copies of the weights at its peak than the plain graph does (a 9 MiB dense
#: model, micro-batch 32, k = 8: 2.7x the weights' bytes over a plain step of
#: batch 32, against 1.1x without XLA; benchmarks/memory_auto_xla.py), and it
#: pays most where a model is small and dispatch, not arithmetic, is what a
#: window costs.
AUTO_XLA_MAX_WEIGHT_BYTES = 16 * 2**20


def weight_bytes(model) -> int:
    """Bytes of ``model``'s trainable weights (0 before it is built)."""
    return sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size
               for v in model.trainable_variables)


def xla_mode(model, jit_compile: bool | str) -> str:
    """How XLA compiles ``model``'s window loop: ``"off"`` without
    ``jit_compile``; ``"whole_call"`` on arrays; ``"per_micro_batch"`` (with a
    warning) where XLA would slow the whole loop down: convolutions on a CPU.

    ``"auto"`` is ``"arrays"`` (the whole call on arrays, as
    ``"whole_call"``, once the trainer has run
    :data:`AUTO_XLA_AFTER_MICRO_STEPS` micro-steps in plain graphs, and a
    dataset's micro-steps left to TensorFlow) where
    every layer supports XLA (Keras's ``model_supports_jit``), XLA is not
    slower on the device (no convolution on a CPU) and the trainable weights
    take at most :data:`AUTO_XLA_MAX_WEIGHT_BYTES`, ``"off"`` otherwise. A
    dataset's micro-steps are not compiled: each is then an XLA launch inside
    TensorFlow's loop, which measured slower than none (the dispatch
    benchmark's MLP on its pipeline: 143 ms an epoch against 110 ms,
    2026-11-27, TensorFlow 2.21.0, 2 CPU cores).
    """
    if jit_compile == "auto":
        fast = _keras.model_supports_jit(model) and not _slow_in_a_cpu_xla_loop(model)
        small = weight_bytes(model) <= AUTO_XLA_MAX_WEIGHT_BYTES
        return "arrays" if fast and small else "off"
    if not jit_compile:
        return "off"
    slow = _slow_in_a_cpu_xla_loop(model)
    if slow:
        _warn_micro_steps_compiled(slow)
        return "per_micro_batch"
    return "whole_call"


def _slow_in_a_cpu_xla_loop(model) -> list[str]:
    """The kinds of ``model``'s layers that compiling the window loop with XLA
    would slow down: convolutions, when TensorFlow sees no GPU."""
    if tf.config.list_logical_devices("GPU"):
        return []
    return sorted({type(layer).__name__ for layer in _keras.flatten_layers(model)
                   if isinstance(layer, _SLOW_IN_A_CPU_XLA_LOOP)})


def _warn_micro_steps_compiled(slow_layers):
    warnings.warn(
        f"jit_compile=True on a CPU: XLA runs the gradients of {', '.join(slow_layers)} "
        "layers tens of times slower inside a loop than alone (a known XLA issue, "
        "jax-ml/jax#12868), so gaviz compiles each micro-step with XLA, not the whole "
        "window loop. The numbers are the same either way.",
        stacklevel=5,  # the line that made the trainer
    )
