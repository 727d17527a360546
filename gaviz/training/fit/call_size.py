"""How many windows one graph call runs (``windows_per_call``).

Keras's ``steps_per_execution`` for windows: several windows per call cut
what Python and dispatch cost per update; one window per call lets a
callback see (and stop) each update before the next starts.
"""

from __future__ import annotations

import warnings

import tensorflow as tf

#: With ``windows_per_call="auto"`` and nobody listening, calls grow (doubling)
#: while they take less than this, so Python's share of an epoch shrinks while
#: ``stop_training`` still lands within a tenth of a second (and the progress
#: bar, which Keras redraws at most every 50 ms, still moves). At 20 ms, calls
#: of the dispatch benchmark's XLA windows (about 1.5 ms each) stopped at 8 or
#: 16 windows, whichever side of 20 ms a call fell on: 54.9 and 48.7 ms an
#: epoch, against 46.7 at 32 (2026-11-27, benchmarks/bench_dispatch.py's MLP).
AUTO_CALL_SECONDS = 0.1
AUTO_MAX_WINDOWS = 256


class CallSize:
    """How many windows the next graph call may run (``windows_per_call``).

    With several workers, ``"auto"`` never grows: each worker would time its
    own calls and pick its own sizes, and a worker reading the epoch's
    metrics (an all-reduce) while another still runs windows (all-reduces
    of gradients) deadlocks both, since collectives must be issued in the
    same order on every worker.
    """

    def __init__(self, windows_per_call, workers=1):
        self.auto = windows_per_call == "auto"
        self.size = 1 if self.auto else windows_per_call
        #: The most windows a call may ever run (the graph's result rows).
        self.capacity = AUTO_MAX_WINDOWS if self.auto else windows_per_call
        self.may_grow = self.auto and workers == 1
        self.listening = False
        #: One window a call, whatever was asked (:meth:`hold_at_one`).
        self.held = False
        self._tensors = {}

    def hold_at_one(self, windows_per_call, replicas: int, stacklevel: int = 2) -> None:
        """From now on one window a call (said where ``windows_per_call`` asked
        for more): each window's sparse gradients are all-gathered across
        ``replicas`` in a shape of their own, and TensorFlow's collectives fix an
        operation's shape at its first run within a call."""
        self.held = True
        if windows_per_call != "auto" and windows_per_call > 1:
            warnings.warn(f"windows_per_call={windows_per_call} runs one window per graph call "
                          f"here: sparse gradients are gathered across {replicas} replicas, in "
                          "a shape of each window's own, which TensorFlow's collectives fix at "
                          "their first run within a call. The numbers are the same.",
                          UserWarning, stacklevel=stacklevel + 1)

    def next(self) -> tf.Tensor:
        size = 1 if (self.auto and self.listening) or self.held else self.size
        if size not in self._tensors:
            self._tensors[size] = tf.constant(size, tf.int32)
        return self._tensors[size]

    def observe(self, seconds, windows) -> None:
        """Doubles a full call that was quick (auto, one worker, nobody listening)."""
        grow = self.may_grow and not self.listening and not self.held and windows == self.size
        if grow and seconds < AUTO_CALL_SECONDS:
            self.size = min(2 * self.size, AUTO_MAX_WINDOWS)


def worker_count(strategy) -> int:
    """Processes taking part in ``strategy``'s collectives (1 without a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    tasks = resolver.cluster_spec().as_dict()
    return max(1, sum(len(tasks.get(job, ())) for job in ("chief", "worker")))
