"""An independent big-batch reference: plain eager GradientTape training.

It shares no code with gaviz. Windows of micro-batches are concatenated into
big batches here, and each big batch gets one ordinary update with Keras's
``sum_over_batch_size`` loss plus ``model.losses``.
"""

import numpy as np
import tensorflow as tf


def group_windows(micro_batches, accumulation_steps, tail, epochs):
    """Big batches (as tuples of concatenated numpy arrays) in update order.

    micro_batches: list of (x, y) or (x, y, w) numpy tuples, one epoch.
    """
    windows, pending = [], []
    for _ in range(epochs):
        for micro in micro_batches:
            pending.append(micro)
            if len(pending) == accumulation_steps:
                windows.append(pending)
                pending = []
        if pending and tail == "flush":
            windows.append(pending)
            pending = []
        elif tail == "drop":
            pending = []
    return [tuple(np.concatenate(parts) for parts in zip(*w)) for w in windows]


def train_big_batches(model, optimizer, per_sample_loss, big_batches):
    """One optimizer update per big batch; returns the loss of each update."""
    losses = []
    variables = model.trainable_variables
    for batch in big_batches:
        x, y = batch[0], batch[1]
        with tf.GradientTape() as tape:
            values = per_sample_loss(y, model(x, training=True))
            if len(batch) == 3:
                w = tf.constant(batch[2], values.dtype)
                w = tf.reshape(w, [-1] + [1] * (len(values.shape) - 1))
                values = values * w
            loss = tf.reduce_sum(values) / tf.cast(tf.size(values), values.dtype)
            if model.losses:
                loss = loss + tf.add_n(model.losses)
        grads = tape.gradient(loss, variables)
        grads = [tf.zeros(v.shape) if g is None else g for g, v in zip(grads, variables)]
        optimizer.apply_gradients(zip(grads, variables))
        losses.append(float(loss))
    return losses


def micro_batches(x, y, sizes, w=None):
    """Splits arrays into consecutive micro-batches of the given sizes."""
    out, start = [], 0
    for size in sizes:
        part = (x[start : start + size], y[start : start + size])
        if w is not None:
            part += (w[start : start + size],)
        out.append(part)
        start += size
    assert start == len(x), "sizes must cover the data exactly"
    return out


def dataset_of(micro):
    """A tf.data.Dataset yielding exactly these (possibly ragged) micro-batches."""
    parts = [tf.data.Dataset.from_tensors(tuple(tf.constant(a) for a in m)) for m in micro]
    ds = parts[0]
    for p in parts[1:]:
        ds = ds.concatenate(p)
    return ds


def max_weight_difference(model_a, model_b):
    return max(
        float(np.max(np.abs(a - b))) for a, b in zip(model_a.get_weights(), model_b.get_weights())
    )
