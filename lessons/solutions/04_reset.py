"""Lesson 04 solutions: zero the accumulators after each update, and spot a missing reset.

``reset`` is the one line the broken loop forgot; ``update_norms_grow`` is the
symptom to look for when you suspect it: at a small learning rate, the size of
update t grows with t instead of staying about the same.
"""

import numpy as np
import tensorflow as tf


def reset(accumulators):
    """Sets every accumulator to zeros, in place.

    Args:
        accumulators: ``tf.Variable``s holding a window's summed gradients.
            Each keeps its shape and dtype; nothing is returned.
    """
    for accumulator in accumulators:
        accumulator.assign(tf.zeros_like(accumulator))


def update_norms_grow(norms, factor=2.0):
    """Whether update sizes show the missing-reset symptom.

    Args:
        norms: sizes ``|w_after - w_before|`` of successive updates (at least two).
        factor: how much larger the last update must be than the first.

    Returns:
        True when every update is larger than the one before it and the last
        is at least ``factor`` times the first; False otherwise.

    Raises:
        ValueError: fewer than two norms.
    """
    norms = np.asarray(norms, dtype=np.float64)
    if norms.ndim != 1 or len(norms) < 2:
        raise ValueError(f"`norms` must hold at least two update sizes. Received: norms={norms!r}")
    rising = bool(np.all(np.diff(norms) > 0))
    return rising and bool(norms[-1] >= factor * norms[0])
