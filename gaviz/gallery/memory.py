"""Peak memory of a piece of work, on whatever device TensorFlow uses.

On a GPU: TensorFlow's allocator statistics (``get_memory_info``'s peak,
reset first). On the CPU: the process's resident memory, sampled from a
background thread while the work runs, minus what it was before. The same
call works on both, like the trainer, which places nothing explicitly.
``device="CPU:0"`` reads the CPU allocator's statistics instead (what
benchmarks/bench_memory.py uses): only TensorFlow's tensors, but exactly.

On the CPU, freed memory often stays resident (oneDNN's caches, the C
library keeping large freed blocks for reuse), so a second measurement in
the same process can read far lower than the first. For comparable figures,
measure each configuration in a fresh process (as the benchmarks do), or
set ``TF_ENABLE_ONEDNN_OPTS=0`` and ``MALLOC_TRIM_THRESHOLD_`` before
TensorFlow starts. Work shorter than the sampling interval can be missed.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass

import tensorflow as tf


@dataclass(frozen=True)
class MemoryReport:
    """What :func:`measure_peak_memory` saw.

    Attributes:
        device: ``"GPU:0"`` or ``"CPU"``.
        baseline_bytes: in use when the work started.
        peak_bytes: the most in use while it ran.
    """

    device: str
    baseline_bytes: int
    peak_bytes: int

    @property
    def growth_bytes(self) -> int:
        """Peak above the baseline: what the work itself needed."""
        return max(0, self.peak_bytes - self.baseline_bytes)

    def __str__(self) -> str:
        return f"{self.device}: peak {self.growth_bytes / 2**20:.1f} MiB above baseline"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the lifetime high-water mark is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: Set before TensorFlow starts, this turns on oneDNN, whose CPU allocator keeps
#: statistics. TensorFlow turns oneDNN on by itself on CPUs with AVX-512 (where
#: the benchmarks' memory figures were first measured); on other CPUs its
#: default allocator keeps none.
CPU_ALLOCATOR_STATS_ENV = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def _reset_allocator_stats(device: str) -> None:
    try:
        tf.config.experimental.reset_memory_stats(device)
    except ValueError:
        setting = " ".join(f"{k}={v}" for k, v in CPU_ALLOCATOR_STATS_ENV.items())
        hint = (f" On a CPU, set {setting} in the environment before TensorFlow starts."
                if "CPU" in device.upper() else "")
        raise ValueError(
            f"`device`={device!r} keeps no allocator statistics in this process.{hint} "
            "Or leave `device` unset to measure the process's resident memory."
        ) from None


def measure_peak_memory(
    work, *args, interval: float = 0.002, device: str | None = None, **kwargs
):
    """Runs ``work(*args, **kwargs)``; returns ``(its result, MemoryReport)``.

    Args:
        work: the function to measure.
        interval: seconds between resident-memory samples (CPU default only).
        device: ``None`` measures the first GPU's allocator if there is a GPU,
            else the process's resident memory (everything: tensors, NumPy,
            Python). A device name such as ``"CPU:0"`` or ``"GPU:0"`` reads
            that device's TensorFlow allocator statistics instead: tensors
            only, but exact, with no sampling, and not hidden by freed memory
            the process keeps (a second measurement in one process is fine).
    """
    if device is None and tf.config.list_logical_devices("GPU"):
        device = "GPU:0"
    if device is not None:
        _reset_allocator_stats(device)
        baseline = tf.config.experimental.get_memory_info(device)["current"]
        result = work(*args, **kwargs)
        peak = tf.config.experimental.get_memory_info(device)["peak"]
        return result, MemoryReport(device, baseline, peak)

    baseline = _rss_bytes()
    peak = [baseline]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = work(*args, **kwargs)
    finally:
        done.set()
        sampler.join()
    peak[0] = max(peak[0], _rss_bytes())
    return result, MemoryReport("CPU", baseline, peak[0])
