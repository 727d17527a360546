"""How many micro-steps of a window may run at once: one, or two overlapped.

A window's loop over its micro-batches is a ``tf.while_loop``. Run one
iteration at a time (``parallel_iterations=1``), only one micro-batch's
activations are alive at the peak, which is what accumulation is for. But on
a small model, launching a micro-step's many small operations, not their
arithmetic, is what it costs, and letting the next micro-step start while
this one finishes keeps both cores busy: the dispatch benchmark's MLP trains
on a ``tf.data`` pipeline, and on arrays without XLA, about 1.5x faster
(benchmarks/bench_dispatch.py). Keras's ``steps_per_execution`` loop
overlaps up to 10 of its steps.

So two micro-steps overlap where what a second one in flight holds is
small: :func:`micro_steps_in_flight` allows it when the trainable weights'
bytes (a second micro-step's gradients) plus an estimate of one micro-batch's
activations come to at most :data:`OVERLAP_MAX_BYTES`, and when overlapping
changes no number: nothing in the forward pass changes state (no
non-trainable variables: no batch statistics, no dropout's seed), the rule
is the exact one (no update inside the window, no all-reduce per micro-batch),
and there is one replica. The sums are added in the same
order either way (each addition waits for the one before), so the weights
are those of one micro-step at a time.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from gaviz import _keras

#: The most bytes a second micro-step in flight may hold (its gradients and
#: activations, estimated) for two to overlap.
OVERLAP_MAX_BYTES = 4 * 2**20

#: Activations kept for the backward pass, as a multiple of the layers'
#: outputs: a layer keeps its input and, inside it, what its activation needs.
ACTIVATION_COPIES = 3


def micro_steps_in_flight(model, rows: int, weight_bytes: int, exact_steps: bool,
                          replicas: int) -> int:
    """2 where two micro-steps may overlap (see the module's docstring), else 1.

    Args:
        model: the Keras model trained.
        rows: rows of a micro-batch.
        weight_bytes: bytes of the trainable weights.
        exact_steps: the micro-steps only add to the window (the exact
            rule): no update and no all-reduce inside a window.
        replicas: the strategy's replicas in sync.
    """
    if not exact_steps or replicas != 1 or model.non_trainable_variables:
        return 1
    per_row = output_bytes_per_row(model)
    if per_row is None:
        return 1
    held = weight_bytes + ACTIVATION_COPIES * per_row * rows
    return 2 if held <= OVERLAP_MAX_BYTES else 1


def output_bytes_per_row(model) -> int | None:
    """Bytes per row of every layer's output in ``model`` (a Functional or
    Sequential model's graph of layers, nested ones included), or None where
    a layer's output shape is not known (a subclassed model, or a model in it)."""
    if not isinstance(model, _keras.GRAPH_MODELS):
        return None
    total = 0
    for layer in model.layers:
        try:
            outputs = tf.nest.flatten(layer.output)
        except (AttributeError, ValueError):
            return None
        for output in outputs:
            shape = tuple(output.shape)[1:]
            if any(size is None for size in shape):
                return None
            total += math.prod(shape) * tf.as_dtype(output.dtype).size
        if isinstance(layer, keras.Model):  # a model in the model: its layers' outputs too
            inner = output_bytes_per_row(layer)
            if inner is None:
                return None
            total += inner
    return total
