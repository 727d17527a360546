"""The cached window: a window's gradient for a loss that couples a batch's rows.

A contrastive loss with in-batch negatives, Circle, Dice, a batch-normalized
or batch-ranked loss: each row's loss depends on the batch's other rows, so
the sum of micro-batches' losses is not the big batch's, whatever the
divisor. GradCache's idea (Gao et al., 2021) makes it exact at the memory of
one micro-batch's activations plus the window's outputs:

1. each micro-batch runs forward, without a tape, and its outputs are kept;
2. the compiled loss runs once on the whole window's outputs and targets,
   their rows in order (``Model.fit``'s big batch), and its gradient with
   respect to those outputs is taken;
3. each micro-batch runs forward again, with a tape, and back-propagates its
   rows of that output gradient; the weights' gradients add up to the
   gradient of the window's loss.

It costs one more forward pass per micro-batch. The second pass draws the
same random masks as the first, and layers' own state (moving statistics)
moves once per micro-batch (``gaviz.training.cached.replay``). The
compiled metrics and Keras's per-output loss trackers see the window's
outputs once, as ``Model.fit``'s see its batch.

:class:`CachedWindow` is the window loop's second way to make a window: the
first, ``gaviz.training.loop.summing.SummingWindow``, sums each
micro-batch's gradients as it comes. Both give the window's
:class:`~gaviz.training.window.arithmetic.WindowSums` (an Embedding's rows
as :mod:`~gaviz.training.window.occurrences`), and the window's cycle
(reduce, finish, judge, apply) is the same. Here the sums are the finished
gradient already: the loss is divided by Keras's own reduction, so the
window's normalizer is 1.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from gaviz import _keras
from gaviz.training.cached.kept import (
    Kept,
    concatenated,
    get_item,
    plain,
    reserved,
    set_item,
    spec_of,
)
from gaviz.training.cached.replay import StateVariables
from gaviz.training.fit import optimizers
from gaviz.training.loop.forward_backward import Reach, gradients, regularized_weights, unpack
from gaviz.training.window import arithmetic
from gaviz.training.window.arithmetic import WindowSums


class Window(NamedTuple):
    """A cached window's micro-batches: inputs, targets, sample weights, each kept."""

    x: Kept
    y: Kept
    sample_weight: Kept


class CachedWindow:
    """Keeps a window's micro-batches, then makes its gradient in two passes.

    Args:
        model: the Keras model, compiled (its ``CompileLoss`` is the loss).
        optimizer: the optimizer (a loss-scaling one scales the window's loss).
        spec: a micro-batch's ``(x, y, sample_weight)`` of ``tf.TensorSpec``
            (``sample_weight`` None when there is none).
        reach: where the second pass notes which variables the loss reached.
        store: a ``KeptStore`` (``gaviz.training.cached.store``) for a window
            carried into the next call, or None.
        sparse: the variables (by index) whose gradients arrive as ``tf.IndexedSlices``.
        jit: XLA compiles each micro-batch's forward and backward pass.
    """

    def __init__(self, model, optimizer, spec, reach=None, store=None, sparse=frozenset(),
                 jit: bool = False):
        self.model, self.optimizer = model, optimizer
        self.spec = tuple(plain(part) for part in spec)
        self.reach = reach or Reach()
        self.store, self.sparse = store, frozenset(sparse)
        self.loss_scaled = optimizers.loss_scaled(optimizer)
        self.state = StateVariables.of(model)
        # Without XLA each pass is traced into the window loop's graph, as the
        # summing window's micro-step is (a nested function's activations
        # measured alive longer: benchmarks/bench_cached.py).
        self._traced_forward = tf.function(self._forward_pass, jit_compile=jit, autograph=False)
        self._forward = self._traced_forward if jit else self._forward_pass
        self._backward = (tf.function(self._backward_pass, jit_compile=True, autograph=False)
                          if jit else self._backward_pass)

    # ------------------------------------------- what the window loop asks

    @property
    def carries(self) -> bool:
        """Whether a window open at a call's end is kept for the next call."""
        return self.store is not None

    def start(self, variables) -> Window:
        """The window a call starts from: the micro-batches carried, or none."""
        del variables
        return self.fresh(None) if self.store is None else self.store.read()

    def add(self, element, window: Window, micro_sums=None, k=None) -> Window:
        """Keeps one micro-batch: nothing runs until the window ends."""
        del micro_sums, k
        return Window(*(kept.pushed(part) for kept, part in zip(window, unpack(element))))

    def fresh(self, window) -> Window:
        """An empty window."""
        del window
        return Window(*(Kept.empty(part) for part in self.spec))

    def keep(self, window: Window) -> None:
        """Keeps an open window's micro-batches for the next call."""
        self.store.write(window)

    def finished(self, window: Window, variables) -> WindowSums:
        """The gradient of the window's loss, computed on all its rows at once, its
        loss and its rows (in replica context, on one replica)."""
        count = window.x.count()
        outputs, seeds, added, rows = self._first_pass(window, count)
        y_true = window.y.joined(self.spec[1])
        sample_weight = window.sample_weight.joined(self.spec[2])
        window_rows = tf.reduce_sum(rows)
        shares = tf.math.divide_no_nan(rows, window_rows)
        flat = tf.nest.flatten(outputs)
        with tf.GradientTape() as tape:
            tape.watch(flat)
            loss = tf.cast(_keras.compile_loss(self.model)(y_true, outputs, sample_weight),
                           tf.float32)
            total = loss + tf.reduce_sum(added * shares)
            target = total * self._loss_scale()
        output_gradients = tape.gradient(target, flat)
        metrics = _keras.compile_metrics(self.model)
        if metrics is not None:
            metrics.update_state(y_true, outputs, sample_weight)
        after_first = self.state.read()
        sums = arithmetic.gathered(self._second_pass(window, count, seeds, rows, output_gradients,
                                                     shares * self._loss_scale(), variables),
                                   variables)
        done = tf.nest.flatten(sums.gradients, expand_composites=True)
        with tf.control_dependencies(done):
            put_back = self.state.put_back(after_first)
        with tf.control_dependencies(put_back):
            window_rows = tf.identity(window_rows)
        return WindowSums(sums.gradients, total, window_rows, tf.constant(1.0), window_rows)

    def sparse_gradients(self, element, strategy) -> frozenset:
        """The variables (by index) whose gradient a micro-batch's backward pass
        gives as ``tf.IndexedSlices``, found by tracing it once (nothing runs)."""
        found = set()

        def replica(*element):
            x = unpack(element)[0]
            grads = self._backward_pass(x, None, tf.constant(0.0), note=False)
            found.update(i for i, g in enumerate(grads) if isinstance(g, tf.IndexedSlices))

        def trace(*element):
            strategy.run(replica, args=element)
            return tf.constant(0)

        tf.function(trace, autograph=False).get_concrete_function(*element)
        return frozenset(found)

    # ------------------------------------------------------- the two passes

    def _first_pass(self, window: Window, count):
        """Each micro-batch forward, without a tape: ``(the window's outputs, its
        rows in order, masks attached; each micro-batch's seed states before it;
        what its layers added; its rows)``."""
        out_spec = self._output_spec()
        flat_spec = tf.nest.flatten(out_spec)
        masked = {i: spec for i, spec in enumerate(self._mask_spec()) if spec is not None}

        def body(j, outputs, masks, seeds, added, rows):
            seeds = [set_item(log, j, value) for log, value in zip(seeds, self.state.seeds_now())]
            with tf.control_dependencies(seeds):
                x = window.x.item(j, self.spec[0])
            y_pred, extra, mask = self._forward(x)
            outputs = [set_item(o, j, value) for o, value in zip(outputs, tf.nest.flatten(y_pred))]
            masks = [set_item(m, j, mask[i]) for m, i in zip(masks, masked)]
            added = tf.tensor_scatter_nd_update(added, [[j]], [extra])
            rows = tf.tensor_scatter_nd_update(rows, [[j]], [_rows(x)])
            return j + 1, outputs, masks, seeds, added, rows

        outputs = [reserved(s, count) for s in flat_spec]
        masks = [reserved(spec, count) for spec in masked.values()]
        seeds = [reserved(tf.TensorSpec(v.shape, v.dtype), count) for v in self.state.seeds]
        zeros = tf.zeros([count], tf.float32)
        _, outputs, masks, seeds, added, rows = tf.while_loop(
            lambda j, *_: j < count, body, (tf.constant(0), outputs, masks, seeds, zeros, zeros),
            parallel_iterations=1)
        joined = [concatenated(o, s) for o, s in zip(outputs, flat_spec)]
        for (i, spec), mask in zip(masked.items(), masks):
            _keras.set_keras_mask(joined[i], concatenated(mask, spec))
        return tf.nest.pack_sequence_as(out_spec, joined), seeds, added, rows

    def _second_pass(self, window: Window, count, seeds, rows, output_gradients, shares,
                     variables):
        """Each micro-batch forward again with its first pass's seed states, and
        back with its rows of ``output_gradients``: the window's summed gradients."""
        offsets = tf.concat([[0], tf.cumsum(tf.cast(rows, tf.int32))], 0)

        def body(j, sums):
            values = [get_item(log, j, tf.TensorSpec(v.shape, v.dtype))
                      for log, v in zip(seeds, self.state.seeds)]
            with tf.control_dependencies(self.state.put_seeds(values)):
                x = window.x.item(j, self.spec[0])
            rows_j = [g[offsets[j]:offsets[j + 1]] for g in output_gradients]
            micro = WindowSums(self._backward(x, rows_j, shares[j]), tf.constant(0.0),
                               tf.constant(0.0), tf.constant(0.0), tf.constant(0.0))
            return j + 1, arithmetic.add(sums, micro)

        start = arithmetic.zeros(variables, self.sparse)
        _, sums = tf.while_loop(lambda j, sums: j < count, body, (tf.constant(0), start),
                                parallel_iterations=1)
        return sums

    def _forward_pass(self, x):
        """A micro-batch's outputs in training, what its layers added (their
        forward losses, a mean over its rows) and the outputs' Keras masks (flat,
        None where an output has none)."""
        y_pred = self.model(x, training=True)
        masks = [_keras.get_keras_mask(o) for o in tf.nest.flatten(y_pred)]
        return y_pred, _forward_losses(self.model), masks

    def _backward_pass(self, x, output_gradients, share, note: bool = True):
        """The gradient, with respect to the trained variables, of the micro-batch's
        outputs dotted with their rows of the window's output gradient (None: ones),
        plus its ``share`` of what its layers added."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            y_pred = tf.nest.flatten(self.model(x, training=True))
            if output_gradients is None:
                output_gradients = [tf.ones_like(o) for o in y_pred]
            dotted = [tf.reduce_sum(tf.cast(o, tf.float32) * tf.cast(tf.stop_gradient(g),
                                                                         tf.float32))
                      for o, g in zip(y_pred, output_gradients)]
            target = tf.add_n(dotted) + share * _forward_losses(self.model)
        return gradients(tape, target, variables, self.reach if note else None)

    def _output_spec(self):
        """The model's outputs on a micro-batch, as a nest of ``tf.TensorSpec``
        (rows unknown)."""
        return spec_of(self._traced_forward.get_concrete_function(
            self.spec[0]).structured_outputs[0])

    def _mask_spec(self) -> list:
        """Per output (flat), the ``tf.TensorSpec`` of its Keras mask, or None."""
        masks = self._traced_forward.get_concrete_function(self.spec[0]).structured_outputs[2]
        return [None if m is None else tf.TensorSpec([None, *m.shape[1:]], m.dtype)
                for m in masks]

    def _loss_scale(self):
        """The factor a loss-scaling optimizer multiplies the loss by (1 without one)."""
        if not self.loss_scaled:
            return tf.constant(1.0)
        return tf.cast(self.optimizer.scale_loss(tf.constant(1.0)), tf.float32)


def _forward_losses(model):
    """The losses the last forward pass added (``add_loss``, activity
    regularizers), summed; the weights' regularizers are left to the window."""
    losses = model.losses
    n_forward = len(losses) - len(regularized_weights(model))
    if n_forward <= 0:
        return tf.constant(0.0)
    return tf.add_n([tf.cast(value, tf.float32) for value in losses[:n_forward]])


def _rows(x):
    return tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)
