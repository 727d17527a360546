"""One run model for the demo problem: a plan, its result, and one way to train it.

``compare_steps``, ``python -m gaviz compare`` and the dashboard all plan
their runs with :func:`plan_runs` and train each with :func:`train_run`, so a
run is labelled, timed and measured the same way everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from gaviz import demo
from gaviz._arguments import check_one_of, check_positive_int
from gaviz.gallery import measure
from gaviz.gallery.pitfalls import PITFALLS, RECORDS
from gaviz.training.fit.history import History
from gaviz.training.trainer import AccumulationTrainer
from gaviz.training.window.tail import Tail

#: The trainer name of the exact trainer; every other name is a pitfall's.
EXACT = "exact"
HOLDS = ("effective", "micro")
#: The trainers a run of the demo problem can train: the exact one and each pitfall
#: that shows with any optimizer. The demo's optimizers (``demo.OPTIMIZERS``) neither
#: clip nor schedule, so a pitfall that ``requires`` either would only raise.
DEMO_TRAINERS = (EXACT, *(name for name, record in RECORDS.items() if record.requires is None))


@dataclass(frozen=True)
class RunPlan:
    """One training run of the demo problem, before it starts."""

    accumulation_steps: int
    micro_batch_size: int
    effective_batch_size: int
    updates_per_epoch: int
    epochs: int = 1
    trainer: str = EXACT
    optimizer: str = "adam"
    learning_rate: float = 0.01
    tail: str = "flush"
    samples: int = 4096
    hidden: int = 64
    seed: int = 0
    #: A batch-size warm-up: k doubles each epoch, from 1 up to ``accumulation_steps``.
    warmup: bool = False

    @property
    def label(self) -> str:
        k = f"1→{self.accumulation_steps}" if self.warmup else self.accumulation_steps
        return f"k={k}, micro {self.micro_batch_size}, effective {self.effective_batch_size}"

    def steps(self, epoch: int) -> int:
        """k in ``epoch`` (from 1): ``accumulation_steps``, or the warm-up's value."""
        if not self.warmup:
            return self.accumulation_steps
        return min(self.accumulation_steps, 2 ** (epoch - 1))


@dataclass
class RunResult:
    """What a planned run produced.

    ``seconds`` is the wall time of ``fit``, tracing of the window function
    included (a first run is slower for it). ``distance_from_exact`` is,
    for a pitfall, the distance of its final weights from the exact
    trainer's on the same run (:func:`gaviz.gallery.measure.compare_runs`).
    """

    plan: RunPlan
    history: History = field(default_factory=History)
    seconds: float = 0.0
    distance_from_exact: float | None = None
    error: str | None = None
    trainer: AccumulationTrainer | None = None

    label = property(lambda self: self.plan.label)
    accumulation_steps = property(lambda self: self.plan.accumulation_steps)
    micro_batch_size = property(lambda self: self.plan.micro_batch_size)
    effective_batch_size = property(lambda self: self.plan.effective_batch_size)

    @property
    def samples_per_second(self) -> float:
        if not self.history or not self.seconds:
            return 0.0
        return self.history.samples_seen[-1] / self.seconds


def batch_sizes(steps, hold: str, effective_batch_size: int, micro_batch_size: int):
    """``(micro_batch_size, effective_batch_size)`` for each step count.

    ``hold="effective"`` keeps the effective batch and shrinks the micro-batch
    as k grows (what accumulation is for: the same training in less memory);
    ``hold="micro"`` keeps the micro-batch and grows the effective batch.
    """
    check_one_of("hold", hold, HOLDS)
    sizes = []
    for k in steps:
        k = check_positive_int("steps", k)
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


def plan_runs(steps, hold="effective", effective_batch_size=256, micro_batch_size=32,
              samples=4096, tail="flush", **settings) -> list[RunPlan]:
    """One plan per step count; ``settings`` are the other :class:`RunPlan` fields.

    Raises:
        ValueError: no step count, a micro-batch larger than the data, or a
            held effective batch that a step count does not divide.
    """
    steps = list(steps)
    if not steps:
        raise ValueError("Choose at least one accumulation step count.")
    trainer = settings.get("trainer", EXACT)
    check_one_of("trainer", trainer, DEMO_TRAINERS)
    plans = []
    for k, (micro, effective) in zip(
        steps, batch_sizes(steps, hold, effective_batch_size, micro_batch_size)
    ):
        if micro > samples:
            raise ValueError(
                f"The micro-batch ({micro}) is larger than the data set ({samples} "
                "samples): choose a smaller micro-batch or a larger demo problem."
            )
        updates = Tail(tail).updates_per_epoch(-(-samples // micro), k)
        plans.append(RunPlan(k, micro, effective, updates, tail=tail, samples=samples, **settings))
    return plans


def make_trainer(plan: RunPlan, trainer: str | None = None) -> AccumulationTrainer:
    """A fresh trainer for ``plan`` (``trainer`` overrides the plan's trainer name)."""
    name = plan.trainer if trainer is None else trainer
    cls = AccumulationTrainer if name == EXACT else PITFALLS[name]
    # A pitfall whose mistake is a setting (the tail pitfalls') keeps its own.
    fixed = RECORDS[name].settings if name in RECORDS else {}
    settings = {key: value for key, value in {"tail": plan.tail}.items() if key not in fixed}
    return cls(
        demo.make_model(plan.seed, hidden=plan.hidden),
        demo.make_optimizer(plan.optimizer, plan.learning_rate),
        "mse",
        plan.steps if plan.warmup else plan.accumulation_steps,
        **settings,
    )


def train_run(plan: RunPlan, x, y, on_update: Callable | None = None,
              on_start: Callable[[AccumulationTrainer], None] | None = None,
              result: RunResult | None = None) -> RunResult:
    """Trains ``plan`` on ``(x, y)``; a pitfall is then measured against the exact trainer.

    Args:
        plan: the run.
        x, y: the demo data (``demo.make_data(plan.samples, plan.seed)``).
        on_update: called with each update, as ``fit``'s ``on_update``.
        on_start: called with the trainer before it trains (to stop it later).
        result: a ``RunResult(plan)`` to fill in place (its history grows
            while the run trains), or None for a new one.

    Returns:
        A :class:`RunResult`; a diverging run has ``error`` set and keeps the
        updates before the failure. A run stopped early is not measured.
    """
    result = RunResult(plan) if result is None else result
    result.trainer = trainer = make_trainer(plan)
    if on_start is not None:
        on_start(trainer)
    dataset = demo.make_dataset(x, y, plan.micro_batch_size)
    listeners = [result.history.append] + ([on_update] if on_update else [])
    start = time.perf_counter()
    subject = measure.record_run(trainer, dataset, plan.epochs, listeners, every_update=False)
    result.seconds = time.perf_counter() - start
    if subject.failure is not None:
        failure = subject.failure
        result.error = (
            f"diverged: Update {failure.update} (epoch {failure.epoch}) has a non-finite "
            f"loss or gradient (loss={failure.loss:.3g})"
        )
    if plan.trainer != EXACT and not trainer.stop_training:
        exact = measure.record_run(
            make_trainer(plan, EXACT), dataset, plan.epochs, every_update=False
        )
        if not exact.error:  # when the exact run diverges too there is no distance
            comparison = measure.compare_runs(plan.trainer, subject, exact)
            result.distance_from_exact = comparison.final_weight_distance
    return result
