"""The graph code one call runs: windows of micro-steps, each in four phases.

A window pulls up to k micro-batches from its source, adds each one's
summed gradients into float32 running sums (loop tensors, not variables),
then, in order: sums them across replicas once; finishes them (due or not,
weight penalty, divisor, finite or not); applies the update or skips it;
closes the window (the next one starts from zero, or it is kept for the
next call). The trainer's hooks and rule are read at each of these places.
"""

from __future__ import annotations

import warnings

import keras
import tensorflow as tf

from gaviz import sources, window
from gaviz.micro_step import MicroStep, clip_mean_gradient, unpack
from gaviz.window import WindowResult
from gaviz.window_update import WindowUpdate


class WindowLoop:
    """The graph functions of ``trainer``, one for a dataset's iterator and
    one for arrays: each runs up to ``max_windows`` windows per call."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.micro_step = MicroStep(trainer.model, trainer.optimizer, trainer.objective)
        self.window_update = WindowUpdate(
            trainer.model, trainer.optimizer, trainer.objective, trainer.rule,
            trainer.state.skipped_windows,
        )
        #: Whether XLA compiles a whole call on arrays (every micro-step,
        #: update and the window loop in one program), not only each micro-step.
        slow = _slow_in_a_cpu_xla_loop(trainer.model) if trainer.jit_compile else []
        if slow:
            _warn_micro_steps_compiled(slow)
        self.whole_call_compiled = trainer.jit_compile and not slow
        self.iterator_windows = tf.function(self._iterator_windows)
        self.array_windows = tf.function(
            self._array_windows, reduce_retracing=True, jit_compile=self.whole_call_compiled
        )
        self.compiled_micro_sums = (
            tf.function(self.micro_step.sums, jit_compile=True)
            if trainer.jit_compile else self.micro_step.sums
        )

    def _iterator_windows(self, iterator, max_windows, accumulation_steps):
        # XLA cannot compile an iterator's ops: with jit_compile, the micro-step is.
        source = sources.IteratorSource(iterator)
        return self._windows(source, self.compiled_micro_sums, max_windows, accumulation_steps)

    def _array_windows(self, arrays, order, batch_size, rows, max_windows, accumulation_steps):
        state = self.trainer.state
        source = sources.ArraySource(arrays, order, state.array_cursor, batch_size, rows)
        # Inside one XLA program already, the micro-step is not compiled
        # again (XLA cannot nest the two).
        micro_sums = self.micro_step.sums if self.whole_call_compiled else self.compiled_micro_sums
        return self._windows(source, micro_sums, max_windows, accumulation_steps)

    def _windows(self, source, micro_sums, max_windows, accumulation_steps):
        """Runs up to ``max_windows`` windows, each micro-batch through
        ``micro_sums``; returns ``(rows, done)``: one packed WindowResult row
        per window, the first ``done`` of them filled.

        Stops early when the data runs out or a due window is not finite
        (so the error is raised with the weights of the update before it).
        """
        state, strategy = self.trainer.state, self.trainer.strategy
        sums = strategy.run(state.replica_load, args=(self.trainer.model.trainable_variables,))
        steps = state.micro_steps_in_window.read_value()
        rows = self._result_rows()
        done = tf.constant(0)
        go_on = tf.constant(True)
        while go_on and done < max_windows:
            # Windows one at a time too: the next window's sums start from
            # zeros, so without this its first micro-step could run while this
            # window's gradients are still being applied (more memory at the peak).
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            sums, steps, result = self._window(source, micro_sums, sums, steps, accumulation_steps)
            with tf.name_scope("report"):
                rows = rows.write(done, result.pack())
            done += 1
            go_on = not result.exhausted and (result.finite or not result.due)
        if state.carries:
            strategy.run(state.replica_store, args=(sums,))
        state.micro_steps_in_window.assign(steps)
        return rows.stack(), done

    def _result_rows(self):
        """A TensorArray for one packed WindowResult per window of a call."""
        fields = [len(WindowResult._fields)]
        if self.whole_call_compiled:  # XLA needs a fixed size: the most windows a call runs
            return tf.TensorArray(tf.float64, self.trainer.call_size.capacity, element_shape=fields)
        return tf.TensorArray(tf.float64, 0, dynamic_size=True, element_shape=fields)

    def _window(self, source, micro_sums, sums, steps, k):
        """One window, in four phases: accumulate, finish, apply, close."""
        # The name scopes name the phases' ops in a profile (benchmarks/profile_dispatch.py).
        tail = self.trainer.tail
        sums, steps, consumed, exhausted = self._accumulate(source, micro_sums, sums, steps, k)
        with tf.name_scope("all_reduce"):
            totals = self._reduce(sums)
        full = steps >= k
        # A window ends full or with the data, so only "carry" keeps one open:
        # a Python True adds no conditional over every sum to each window.
        closes = full if tail == "carry" else True
        due = full or (exhausted and tail == "flush" and totals.sample_count > 0)
        with tf.name_scope("finish"):
            loss, grads, finite = self.window_update.finish(totals, steps, k)
        with tf.name_scope("update"):
            applied = self.window_update.update(due and finite, grads)
        with tf.name_scope("report"):
            self.trainer.strategy.run(self._track_window, args=(due and finite, loss, totals.rows))
            self.trainer.state.micro_step.assign_add(consumed)
            result = WindowResult(
                applied, due, finite, exhausted, loss, totals.sample_count, steps, consumed, k,
                totals.rows,
            )
        with tf.name_scope("close"):
            sums, steps = self._close(closes, sums, steps)
        return sums, steps, result

    def _accumulate(self, source, micro_sums, sums, steps, k):
        """Micro-steps until the window is full or the data runs out."""

        def micro_step(element, sums):
            return self.trainer.strategy.run(
                self._replica_micro_step, args=(element, sums, micro_sums)
            )

        return source.accumulate(micro_step, sums, steps, k)

    def _replica_micro_step(self, element, sums, micro_sums):
        """Adds one micro-batch to this replica's running sums (no communication)."""
        trainer = self.trainer
        micro = trainer.rule.contribution(micro_sums(*unpack(element)))
        if trainer.rule.clip_micro_batches:
            micro = clip_mean_gradient(micro, trainer.optimizer)
        micro = trainer.on_micro_batch(micro)
        # Add once the whole backward pass is done. Added as each gradient
        # arrives, a new sum would be allocated while the micro-batch's
        # activations are still alive, raising the peak by the largest weight.
        with tf.control_dependencies(micro.gradients), tf.name_scope("add_to_sums"):
            return window.add(sums, micro)

    def _reduce(self, sums):
        """The window's totals across replicas (every replica holds the same)."""
        strategy = self.trainer.strategy
        reduced = strategy.run(self.trainer.reduce_window, args=(sums,))
        return strategy.experimental_local_results(reduced)[0]

    def _track_window(self, due, loss, rows):
        """Keras's loss tracker sees each window's loss, weighted by its samples.

        Runs in replica context, so each replica adds its share: the tracker's
        sums across replicas are the window's.
        """
        if due:
            share = tf.cast(self.trainer.num_replicas, tf.float32)
            self.trainer.model._loss_tracker.update_state(loss, sample_weight=rows / share)

    def _close(self, closes, sums, steps):
        """A closed window hands its sums to ``next_window``; an open one keeps them."""
        if closes:
            sums = self.trainer.strategy.run(self.trainer.next_window, args=(sums,))
            steps = tf.constant(0, tf.int64)
        return sums, steps


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


def _slow_in_a_cpu_xla_loop(model) -> list[str]:
    """The kinds of ``model``'s layers that compiling the window loop with XLA
    would slow down: convolutions, when TensorFlow sees no GPU."""
    if tf.config.list_logical_devices("GPU"):
        return []
    return sorted({type(layer).__name__ for layer in model._flatten_layers()
                   if isinstance(layer, _SLOW_IN_A_CPU_XLA_LOOP)})


def _warn_micro_steps_compiled(slow_layers):
    warnings.warn(
        f"jit_compile=True on a CPU: XLA runs the gradients of {', '.join(slow_layers)} "
        "layers tens of times slower inside a loop than alone (a known XLA issue, "
        "jax-ml/jax#12868), so gaviz compiles each micro-step with XLA, not the whole "
        "window loop. The numbers are the same either way.",
        stacklevel=4,  # the line that made the trainer
    )
