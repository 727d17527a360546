"""Which device, how much memory, and batch sizes derived from it.

The capstone (lesson 13) picks its device with :func:`accelerator`. The rest
sizes micro-batches from a device's memory, the method of the devices guide's
"Memory" section (which lesson 10 once ran as its GPU section). Everything
here also runs on a machine without a GPU, with a pretend device memory and
TensorFlow's CPU allocator statistics (``get_memory_info("CPU:0")``) instead
of the GPU's.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Callable, NamedTuple

import tensorflow as tf

from gaviz.gallery.memory import measure_peak_memory


def accelerator() -> str:
    """``"GPU:0"`` when TensorFlow sees a GPU, else ``"CPU:0"``."""
    return "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"


def device_memory_bytes(device: str) -> int | None:
    """A GPU's total memory from ``nvidia-smi`` (TensorFlow reports only what it uses);
    None for the CPU, or when ``nvidia-smi`` is missing."""
    if not device.upper().startswith("GPU") or shutil.which("nvidia-smi") is None:
        return None
    index = device.split(":")[-1]
    out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.total",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         check=True).stdout
    return int(float(out.strip().splitlines()[0]) * 2**20)


def bytes_per_sample(step: Callable[[int], object], device: str, sizes=(256, 1024)) -> float:
    """Peak memory a training step needs per extra sample: ``step(batch_size)`` measured at
    two batch sizes on ``device``; the slope leaves out what does not grow with the batch."""
    small, large = (measure_peak_memory(step, size, device=device)[1].growth_bytes
                    for size in sizes)
    return max(1.0, (large - small) / (sizes[1] - sizes[0]))


class Plan(NamedTuple):
    """A big batch that does not fit, and the accumulation that does the same update."""

    big_batch: int  # needs about twice the device's memory
    micro_batch_size: int
    accumulation_steps: int
    need_bytes: float  # what the big batch's step would need

    def __str__(self) -> str:
        return (f"a big batch of {self.big_batch:,} needs about {self.need_bytes / 2**20:,.0f} MiB; "
                f"the same update: {self.accumulation_steps} micro-batches of "
                f"{self.micro_batch_size:,}")


def plan_for(memory_bytes: int, per_sample: float, accumulation_steps: int) -> Plan:
    """Sizes derived from a device's memory: a big batch needing twice of it, and micro-batches
    of ``big_batch / accumulation_steps`` that each need a fraction."""
    micro = max(1, int(2 * memory_bytes / per_sample) // accumulation_steps)
    big = micro * accumulation_steps
    return Plan(big, micro, accumulation_steps, big * per_sample)
