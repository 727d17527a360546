"""The graph code one call runs: windows of micro-steps, their sums in loop tensors.

A window pulls up to k micro-batches from its source, adds each one's
summed gradients into float32 running sums (loop tensors, not variables),
then lives the window's life (:mod:`gaviz.training.window.window_cycle`, the same as
:class:`gaviz.Accumulator`'s): reduced across replicas once, finished, judged,
applied or skipped, reset (or carried into the next call, where the
:class:`~gaviz.training.window.tail.Tail` keeps it open).

:class:`WindowLoop` is built from its parts, as Keras builds its looped
train function from a step function: the micro-step
(:class:`gaviz.training.loop.forward_backward.ForwardBackward`), the window's cycle
(:class:`gaviz.training.window.window_cycle.WindowCycle`), the state
(:class:`gaviz.training.loop.state.TrainerState`), the strategy, the
:class:`gaviz.training.window.rules.Rule` and the tail. It holds no trainer.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz.training.fit.compiling import AUTO_XLA_AFTER_MICRO_STEPS, XLA_MODES
from gaviz.training.loop import sources
from gaviz.training.loop.forward_backward import ForwardBackward
from gaviz.training.loop.state import TrainerState
from gaviz.training.loop.summing import SummingWindow
from gaviz.training.window import rules, window_cycle
from gaviz.training.window.arithmetic import WindowResult
from gaviz.training.window.tail import Tail
from gaviz.training.window.verdicts import ACCEPTED, REFUSALS
from gaviz.training.window.window_cycle import WindowCycle, closing, when

FLUSH = Tail("flush")


class WindowLoop:
    """The graph functions one call runs, one for a dataset's iterator and
    one for arrays: each runs up to ``max_windows`` windows per call.

    Args:
        forward_backward: one micro-batch's forward and backward pass.
        cycle: a window's life once its micro-batches are added.
        state: counters, the array cursor and a carried window.
        strategy: the ``tf.distribute.Strategy`` the loop runs under.
        rule: the window's arithmetic (:data:`gaviz.training.window.rules.EXACT`).
        tail: the :class:`~gaviz.training.window.tail.Tail`: whether a window is
            due and closes (a window open at the end of the data is applied,
            discarded, or carried into the next call).
        loss_tracker: Keras's loss tracker (a ``keras.metrics.Mean``), given
            each applied window's loss weighted by its samples.
        capacity: the most windows one call may run (XLA needs a fixed
            number of result rows).
        xla: one of :data:`gaviz.training.fit.compiling.XLA_MODES`.
        micro_steps_in_flight: micro-steps run at once
            (:mod:`gaviz.training.loop.overlap`).
        sparse: the trained variables (by index) whose gradients arrive as
            ``tf.IndexedSlices``: their windows hold occurrences
            (:mod:`gaviz.training.window.occurrences`), not dense sums.
        window: how a window is made from its micro-batches: a
            :class:`~gaviz.training.loop.summing.SummingWindow` (the default,
            by ``rule``), or a
            :class:`~gaviz.training.cached.cached_window.CachedWindow`.
    """

    def __init__(self, forward_backward: ForwardBackward, cycle: WindowCycle,
                 state: TrainerState, strategy, rule: rules.Rule = rules.EXACT,
                 tail: Tail = FLUSH, loss_tracker=None, capacity: int = 1, xla: str = "off",
                 micro_steps_in_flight: int = 1, sparse=frozenset(), window=None):
        self.forward_backward, self.cycle = forward_backward, cycle
        self.state, self.strategy, self.rule = state, strategy, rule
        self.tail, self.loss_tracker, self.capacity = tail, loss_tracker, capacity
        self.xla, self.micro_steps_in_flight = xla, micro_steps_in_flight
        self.sparse = frozenset(sparse)
        self.window = window or SummingWindow(forward_backward, cycle, state.window, rule, sparse)
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
        feed's pass: :class:`~gaviz.training.loop.sources.IteratorPass` or
        :class:`~gaviz.training.loop.sources.ArrayPass`)."""
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
        source = sources.IteratorSource(iterator, self.micro_steps_in_flight)
        return self._windows(source, self.compiled_micro_sums, max_windows, accumulation_steps)

    def _array_windows_whole(self, arrays, order, batch_size, rows, max_windows,
                             accumulation_steps):
        """:meth:`_array_windows` as one XLA program."""
        return self._array_windows(arrays, order, batch_size, rows, max_windows,
                                   accumulation_steps, whole=True)

    def _array_windows(self, arrays, order, batch_size, rows, max_windows, accumulation_steps,
                       whole: bool = False):
        source = sources.ArraySource(arrays, order, self.state.array_cursor, batch_size, rows,
                                     self.micro_steps_in_flight)
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
        sums = strategy.run(self.window.start, args=(self.forward_backward.variables(),))
        in_window = state.micro_steps_in_window.read_value()

        def more(go_on, done, sums, in_window, reports):
            return tf.logical_and(go_on, done < max_windows)

        def one_window(go_on, done, sums, in_window, reports):
            sums, in_window, result = self._window(source, micro_sums, sums, in_window, accumulation_steps)
            with tf.name_scope("report"):
                reports = reports.write(done, result.pack())
            refused = result.verdict >= min(REFUSALS)
            go_on = tf.logical_not(tf.logical_or(result.exhausted, refused))
            return go_on, done + 1, sums, in_window, reports

        # Windows one at a time too: the next window's sums start from
        # zeros, so without this its first micro-step could run while this
        # window's gradients are still being applied (more memory at the peak).
        _, done, sums, in_window, reports = tf.while_loop(
            more, one_window,
            (tf.constant(True), tf.constant(0), sums, in_window, self._reports(whole)),
            parallel_iterations=1,
        )
        if self.window.carries:
            strategy.run(self.window.keep, args=(sums,))
        state.micro_steps_in_window.assign(in_window)
        return reports.stack(), done

    def _reports(self, whole: bool):
        """A TensorArray for one packed WindowResult per window of a call
        (``whole``: in one XLA program)."""
        fields = [len(WindowResult._fields)]
        if whole:  # XLA needs a fixed size: the most windows a call runs
            return tf.TensorArray(tf.float64, self.capacity, element_shape=fields)
        return tf.TensorArray(tf.float64, 0, dynamic_size=True, element_shape=fields)

    def _window(self, source, micro_sums, sums, in_window, k):
        """One window: accumulate, then its cycle (reduce, finish, judge,
        apply, reset), in the name scopes of a profile."""
        # The name scopes name the phases' ops in a profile (benchmarks/profile_dispatch.py).
        sums, in_window, consumed, exhausted = self._accumulate(source, micro_sums, sums, in_window, k)
        with tf.name_scope("all_reduce"):
            totals = self._reduce(sums)
        full = in_window >= k
        with tf.name_scope("finish"):
            finished = self.cycle.finish(totals, in_window, k)
            verdict = self.cycle.judge(self.tail.due(full, exhausted, in_window), finished.finite)
            accepted = tf.equal(verdict, ACCEPTED)
        with tf.name_scope("update"):
            # Micro-batches up to this window's end, for a rule whose schedule reads them.
            micro_step = self.state.micro_step + consumed if self.rule.schedule_step else None
            applied = self.cycle.apply(accepted, finished.gradients, self._patterns(),
                                       micro_step=micro_step, micro_steps_in_window=in_window)
        with tf.name_scope("report"):
            self.strategy.run(self._track_window, args=(accepted, finished.loss, totals.rows))
            self.state.micro_step.assign_add(consumed)
            result = WindowResult(applied, verdict, exhausted, finished.loss,
                                  totals.sample_count, in_window, consumed, k, totals.rows)
        with tf.name_scope("close"):
            sums, in_window = closing(
                self.tail.closes(full),
                lambda: (self.strategy.run(self.window.fresh, args=(sums,)),
                         tf.constant(0, tf.int64)),
                lambda: (sums, in_window))
        return sums, in_window, result

    def _accumulate(self, source, micro_sums, sums, in_window, k):
        """Micro-steps until the window is full or the data runs out."""

        def add_micro_batch(element, sums):
            return self.strategy.run(self.window.add, args=(element, sums, micro_sums, k))

        return source.accumulate(add_micro_batch, sums, in_window, k)

    def _patterns(self) -> list:
        """The variables an update steps (one pattern): those the loss
        (traced before this) or the weight penalty reaches, by index."""
        return self.cycle.patterns(self.forward_backward.reach.seen())

    def _reduce(self, sums):
        """The window's totals across replicas (every replica holds the same),
        in one batched all-reduce (none left where the rule reduced each
        micro-batch); occurrences are gathered first, and all-reduced as
        Keras's optimizer all-reduces a sparse gradient: the replicas' rows
        side by side."""
        reduce = _summed_already if self.rule.reduce_each_micro_batch else window_cycle.all_reduce
        variables = self.forward_backward.variables()
        reduced = self.strategy.run(lambda sums: reduce(self.window.finished(sums, variables)),
                                    args=(sums,))
        return self.strategy.experimental_local_results(reduced)[0]

    def _track_window(self, accepted, loss, rows):
        """Keras's loss tracker sees each window's loss, weighted by its samples.

        Runs in replica context, so each replica adds its share: the tracker's
        sums across replicas are the window's.
        """
        if self.loss_tracker is None:
            return
        share = tf.cast(self.strategy.num_replicas_in_sync, tf.float32)
        when(accepted, lambda: self.loss_tracker.update_state(loss, sample_weight=rows / share))


def _summed_already(sums):
    """A window whose micro-batches were each summed across replicas as they came."""
    return sums
