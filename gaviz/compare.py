"""Training the demo problem at several accumulation step counts, side by side."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gaviz import checks, demo
from gaviz.history import History
from gaviz.trainer import AccumulationTrainer

HOLDS = ("effective", "micro")


@dataclass
class Run:
    """One training run of a comparison.

    ``seconds`` is the wall time of ``fit``, tracing of the window function
    included (a first run is slower for it).
    """

    accumulation_steps: int
    micro_batch_size: int
    effective_batch_size: int
    history: History
    seconds: float

    @property
    def label(self) -> str:
        return (
            f"k={self.accumulation_steps}, micro-batch {self.micro_batch_size}, "
            f"effective {self.effective_batch_size}"
        )

    @property
    def samples_per_second(self) -> float:
        return self.history.samples_seen[-1] / self.seconds if self.history else 0.0


def batch_sizes(steps, hold: str, effective_batch_size: int, micro_batch_size: int):
    """``(micro_batch_size, effective_batch_size)`` for each step count.

    ``hold="effective"`` keeps the effective batch and shrinks the micro-batch
    as k grows (what accumulation is for: the same training in less memory);
    ``hold="micro"`` keeps the micro-batch and grows the effective batch.
    """
    checks.check_one_of("hold", hold, HOLDS)
    sizes = []
    for k in steps:
        k = checks.check_positive_int("steps", k)
        if hold == "micro":
            sizes.append((micro_batch_size, micro_batch_size * k))
        elif effective_batch_size % k:
            raise ValueError(
                f"`effective_batch_size` must be divisible by every step count when the "
                f"effective batch is held. Received: effective_batch_size="
                f"{effective_batch_size}, steps={k}"
            )
        else:
            sizes.append((effective_batch_size // k, effective_batch_size))
    return sizes


def compare_steps(
    steps=(1, 2, 4, 8),
    hold: str = "effective",
    effective_batch_size: int = 256,
    micro_batch_size: int = 32,
    epochs: int = 5,
    learning_rate: float = 0.01,
    optimizer: str = "adam",
    samples: int = 4096,
    tail: str = "flush",
    seed: int = 0,
) -> list[Run]:
    """Trains the demo model once per step count from the same initial weights.

    With exact accumulation and the effective batch held, every run follows
    the same curve: only the memory per micro-step changes.
    """
    effective_batch_size = checks.check_positive_int("effective_batch_size", effective_batch_size)
    micro_batch_size = checks.check_positive_int("micro_batch_size", micro_batch_size)
    x, y = demo.make_data(samples, seed=seed)
    runs = []
    for k, (micro, effective) in zip(
        steps, batch_sizes(steps, hold, effective_batch_size, micro_batch_size)
    ):
        trainer = AccumulationTrainer(
            demo.make_model(seed),
            demo.make_optimizer(optimizer, learning_rate),
            "mse",
            accumulation_steps=k,
            tail=tail,
        )
        start = time.perf_counter()
        history = trainer.fit(demo.make_dataset(x, y, micro), epochs=epochs)
        runs.append(Run(k, micro, effective, history, time.perf_counter() - start))
    return runs


def format_table(runs, title: str = "") -> str:
    """A fixed-width text table: one row per run."""
    header = f"{'k':>3} {'micro':>6} {'effective':>9} {'updates':>8} {'final loss':>11} {'seconds':>8}"
    lines = [title, header, "-" * len(header)] if title else [header, "-" * len(header)]
    for run in runs:
        lines.append(
            f"{run.accumulation_steps:>3} {run.micro_batch_size:>6} "
            f"{run.effective_batch_size:>9} {len(run.history):>8} "
            f"{run.history.loss[-1]:>11.5f} {run.seconds:>8.2f}"
        )
    return "\n".join(lines)
