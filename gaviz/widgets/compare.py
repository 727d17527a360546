"""Training the demo problem at several accumulation step counts, side by side."""

from __future__ import annotations

from gaviz import demo
from gaviz._arguments import check_positive_int
from gaviz.widgets.runs import HOLDS, RunResult, batch_sizes, plan_runs, train_run

__all__ = ["HOLDS", "batch_sizes", "compare_steps", "format_table"]


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
) -> list[RunResult]:
    """Trains the demo model once per step count from the same initial weights.

    With exact accumulation and the effective batch held, every run follows
    the same curve: only the memory per micro-step changes.
    """
    effective_batch_size = check_positive_int("effective_batch_size", effective_batch_size)
    micro_batch_size = check_positive_int("micro_batch_size", micro_batch_size)
    plans = plan_runs(
        steps, hold, effective_batch_size, micro_batch_size, samples=samples, tail=tail,
        epochs=epochs, learning_rate=learning_rate, optimizer=optimizer, seed=seed,
    )
    x, y = demo.make_data(samples, seed=seed)
    return [train_run(plan, x, y) for plan in plans]


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
