"""The cached window in your own loop: :func:`cached_gradients`.

The trainer's cached window (:mod:`gaviz.training.cached.cached_window`) as
one function of a window's micro-batches: it returns the gradient of the loss
computed once on the whole window, which the loop then applies, or adds to a
:class:`gaviz.Accumulator` as one micro-batch of the window's rows.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz import _keras
from gaviz.training.cached.replay import StateVariables
from gaviz.training.window.occurrences import concatenated


def cached_gradients(model, loss, micro_batches, variables=None):
    """The gradient of ``loss`` on a window of micro-batches taken as one batch,
    computed one micro-batch at a time (GradCache's idea).

    Each micro-batch runs forward without a tape (its outputs kept), ``loss``
    runs once on the window's outputs and targets (their rows in order), then
    each micro-batch runs forward again with its first pass's random draws and
    back-propagates its rows of the loss's gradient with respect to the
    outputs. Peak memory: one micro-batch's activations and the window's
    outputs. Layers' state (moving statistics) moves once per micro-batch. An
    Embedding's gradient comes as ``tf.IndexedSlices``, the window's rows side
    by side, as ``Model.fit``'s big batch hands it over.

    ::

        gradients, value = gaviz.cached_gradients(model, loss_fn, window)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    Args:
        model: a Keras model (called with ``training=True``).
        loss: ``(y_true, y_pred) -> scalar`` or ``(y_true, y_pred,
            sample_weight) -> scalar`` (a Keras ``Loss``): the loss of a batch,
            which may couple its rows (in-batch negatives, Circle, Dice).
        micro_batches: the window: a list of ``(x, y)`` or ``(x, y,
            sample_weight)``, eagerly or in a ``tf.function`` (a Python list:
            the loop is unrolled when traced).
        variables: what the gradient is of (default: ``model.trainable_variables``).

    Returns:
        ``(gradients, loss_value)``: one gradient per variable (None where the
        loss does not reach it), and the window's loss.

    Raises:
        ValueError: ``micro_batches`` is empty.
    """
    micro_batches = [tuple(element) for element in micro_batches]
    if not micro_batches:
        raise ValueError("`micro_batches` must hold at least one micro-batch. Received: []")
    variables = model.trainable_variables if variables is None else list(variables)
    state = StateVariables.of(model)
    seeds, outputs = [], []
    for x, *_ in micro_batches:  # 1. forward, no tape
        seeds.append(state.seeds_now())
        outputs.append(model(x, training=True))
    after_first = state.read()
    y_pred = _joined(outputs)
    y_true = _joined([element[1] for element in micro_batches])
    weights = [element[2] if len(element) > 2 else None for element in micro_batches]
    sample_weight = None if weights[0] is None else _joined(weights)
    flat = tf.nest.flatten(y_pred)
    with tf.GradientTape() as tape:  # 2. the loss once, on the window's outputs
        tape.watch(flat)
        value = (loss(y_true, y_pred) if sample_weight is None
                 else loss(y_true, y_pred, sample_weight))
    output_gradients = tape.gradient(value, flat)
    rows = [tf.shape(tf.nest.flatten(o)[0])[0] for o in outputs]
    total, begin = None, 0
    for (x, *_), seed, count in zip(micro_batches, seeds, rows):  # 3. forward and back again
        state.put_seeds(seed)
        end = begin + count
        with tf.GradientTape() as tape:
            again = tf.nest.flatten(model(x, training=True))
            target = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)
                                             * tf.cast(tf.stop_gradient(g[begin:end]), tf.float32))
                               for o, g in zip(again, output_gradients)])
        total = _added(total, tape.gradient(target, variables))
        begin = end
    state.put_back(after_first)
    return total, value


def _joined(nests):
    """The rows of each micro-batch's nest, one after another; Keras masks too."""
    def join(*tensors):
        joined = tf.concat(tensors, axis=0)
        masks = [_keras.get_keras_mask(t) for t in tensors]
        if all(m is not None for m in masks):
            _keras.set_keras_mask(joined, tf.concat(masks, axis=0))
        return joined

    return tf.nest.map_structure(join, *nests)


def _added(total, gradients):
    """``total + gradients``, a sparse gradient's rows side by side."""
    if total is None:
        return list(gradients)
    summed = []
    for a, g in zip(total, gradients):
        if a is None or g is None:
            summed.append(g if a is None else a)
        elif isinstance(a, tf.IndexedSlices) and isinstance(g, tf.IndexedSlices):
            summed.append(concatenated(a, g))
        else:
            summed.append(tf.convert_to_tensor(a) + tf.convert_to_tensor(g))
    return summed
