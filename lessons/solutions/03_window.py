"""Solution to lesson 03: the arithmetic of one accumulation window.

Accumulators are ``tf.Variable``s, one per trainable variable, that hold the
sum of the window's micro-batch gradients (each the gradient of a micro-batch's
*summed* loss). At the end of the window::

    window gradient = accumulated sum / number of samples in the window

``finish_window`` only divides: resetting the accumulators for the next window
is a piece of its own (lesson 04), as in ``gaviz.course.accumulation_epoch``.
"""

import tensorflow as tf


def accumulate(accumulators, gradients):
    """Adds each gradient into its accumulator, in place; returns ``accumulators``.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(accumulators) != len(gradients):
        raise ValueError(
            f"`gradients` must have one entry per accumulator. Received "
            f"{len(gradients)} gradients for {len(accumulators)} accumulators"
        )
    for accumulator, gradient in zip(accumulators, gradients):
        accumulator.assign_add(tf.cast(gradient, accumulator.dtype))
    return accumulators


def finish_window(accumulators, sample_count):
    """Returns the window's gradients: each accumulated sum over ``sample_count``.

    The accumulators are left as they are. An empty window (``sample_count``
    0) gives zero gradients, not NaN.
    """
    return [
        tf.math.divide_no_nan(accumulator.read_value(), tf.cast(sample_count, accumulator.dtype))
        for accumulator in accumulators
    ]
