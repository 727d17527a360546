"""Lesson 04 solution: spot a missing reset from update sizes.

At a small learning rate, a missing reset makes the size of update t grow with
t instead of staying about the same (or shrinking, as a correct trainer's do).
"""

import numpy as np


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
