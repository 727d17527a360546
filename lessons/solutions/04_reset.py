"""Lesson 04 solution: zero the accumulators after each update.

``reset`` is the one line the broken loop forgot.
"""

import tensorflow as tf


def reset(accumulators):
    """Sets every accumulator to zeros, in place.

    Args:
        accumulators: ``tf.Variable``s holding a window's summed gradients.
            Each keeps its shape and dtype; nothing is returned.
    """
    for accumulator in accumulators:
        accumulator.assign(tf.zeros_like(accumulator))
