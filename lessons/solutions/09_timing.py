"""Solution to lesson 09's exercise: the median time of a training epoch.

One untimed warm-up call absorbs the one-time costs (tracing the graph,
building optimizer slots); the median of the timed calls ignores the odd slow
epoch a busy machine produces, which a mean would not.

The trend, at a fixed micro-batch: every k does the same forward and backward
passes (one per micro-batch), but gaviz makes one graph call per update, so an
epoch of 64 micro-batches costs 64 calls at k=1, 16 at k=4 and 4 at k=16 (and
16 times fewer optimizer steps). The epoch gets faster as k grows, and the gain
flattens: once the calls are few, the fixed arithmetic of the micro-batches is
most of what is left. (The effective batch grows with k too, so this is a
different training run, not the same one faster.)
"""

import statistics
import time


def median_epoch_seconds(fit_once, repeats):
    """Calls ``fit_once()`` once to warm up, then ``repeats`` more times, timed.

    Args:
        fit_once: a callable with no arguments that trains one epoch.
        repeats: how many timed calls (an int >= 1).

    Returns:
        The median wall time of the timed calls, in seconds.

    Raises:
        ValueError: ``repeats`` is not an integer >= 1.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"`repeats` must be an integer >= 1. Received: repeats={repeats!r}")
    fit_once()  # warm-up: tracing and first-call costs are not part of an epoch
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit_once()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)
