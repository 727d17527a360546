"""Two runs from one start, compared: each variable and optimizer variable by
the one rule for equal (:mod:`gaviz.training.verify.closeness`: its gap
against how far training moved it), and the epoch's loss and metrics.

A variable whose gradient is zero up to rounding (an attention key's bias)
is judged again against Model.fit's own gap on the same rows in another
order (:func:`against_noise`): an optimizer that divides by the gradient's
scale (Adam) turns that rounding into full steps, in Keras's own runs too.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple

from gaviz.training.fit import batch_layers
from gaviz.training.verify import closeness
from gaviz.training.verify.snapshot import Snapshot

#: How far (relative) the epoch's loss and metrics may be from Model.fit's.
LOG_TOLERANCE = 1e-4
#: How far past Model.fit's own gap (the same rows in another order) a variable may be.
NOISE_MARGIN = 4


class Trained(NamedTuple):
    """One run's end: the model's and the optimizer's values, its logs, what it
    warned, and the global random generators it drew from."""

    weights: list
    optimizer: list
    logs: dict
    said: list
    drew: list = []


class Judged(NamedTuple):
    """Two runs compared: a ``VariableGap`` per variable and per optimizer
    variable (the worst first), each log entry of both, (ours, theirs), and
    the variables judged against Model.fit's own gap (:func:`against_noise`)."""

    weights: list
    optimizer: list
    logs: dict
    noise: list = []

    def variables_equal(self) -> bool:
        return all(g.equal for g in self.weights + self.optimizer)

    def equal(self, unjudged=(), logs=None) -> bool:
        """Every variable, and the log entries (``logs``: these alone) but
        ``unjudged``, within their bounds."""
        return self.variables_equal() and logs_equal(
            {name: pair for name, pair in self.logs.items()
             if name not in unjudged and (logs is None or name in logs)})

    @property
    def gap(self) -> float:
        """The largest weight's gap, as a fraction of its movement (those moved
        by rounding alone, judged against Model.fit's own gap, aside)."""
        return max([g.relative for g in self.weights if g.name not in self.noise] + [0.0])


def train_from(start: Snapshot, model, optimizer, run: Callable) -> Trained:
    """Runs ``run`` from ``start``'s values; returns where it ended."""
    start.restore_values()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        logs = run()
    return Trained([v.numpy() for v in model.variables],
                   [v.numpy() for v in optimizer.variables], logs, said, start.random.moved())


def compare(model, optimizer, start: Snapshot, ours: Trained, theirs: Trained, terms: int,
            rounding: str) -> Judged:
    """Two runs from ``start`` compared: each variable's and optimizer variable's
    gap (random seed states aside), and each log entry of both."""

    def gaps(variables, got, expected):
        kept = [i for i, v in enumerate(variables) if not batch_layers.seed_state(v)]
        return closeness.variable_gaps(
            [got[i] for i in kept], [expected[i] for i in kept],
            [start.start_value(variables[i]) for i in kept], terms,
            [variables[i].path for i in kept], rounding=rounding)

    logs = {name: (float(ours.logs[name][-1]), float(theirs.logs[name][-1]))
            for name in theirs.logs if name in ours.logs}
    return Judged(gaps(model.variables, ours.weights, theirs.weights),
                  gaps(optimizer.variables, ours.optimizer, theirs.optimizer), logs)


class Judge(NamedTuple):
    """Judges two runs from ``start`` on ``terms`` loss terms a gradient, in
    ``rounding``. ``own_gap(theirs, rows)`` trains Model.fit again on ``rows``
    in another order and compares it with ``theirs``, for variables moved by
    rounding alone: asked only where the variables alone differ and no random
    layer draws (whose masks would change with the order)."""

    model: object
    optimizer: object
    start: Snapshot
    terms: int
    rounding: str
    unjudged: dict
    own_gap: Callable
    drawing: Callable  # () -> whether a random layer draws

    def __call__(self, ours: Trained, theirs: Trained, rows, logs=None) -> Judged:
        judged = compare(self.model, self.optimizer, self.start, ours, theirs, self.terms,
                         self.rounding)
        if judged.variables_equal() or self.drawing() or not Judged(
                [], [], judged.logs).equal(self.unjudged, logs):
            return judged
        weights, optimizer_gaps, noise = against_noise(judged.weights, judged.optimizer,
                                                       self.own_gap(theirs, rows))
        return Judged(weights, optimizer_gaps, judged.logs, noise)


def logs_equal(logs: dict) -> bool:
    return all(math.isclose(ours, theirs, rel_tol=LOG_TOLERANCE, abs_tol=1e-6)
               for ours, theirs in logs.values())


def rounding_of(model) -> str:
    """The float type a model computes in (mixed precision: float16 or bfloat16)."""
    compute = getattr(getattr(model, "dtype_policy", None), "compute_dtype", "float32")
    return compute if compute in ("float16", "bfloat16") else "float32"


def against_noise(weights, optimizer_gaps, own_gaps):
    """The variables judged again against Model.fit's own gap on the same rows
    in another order (``rows.reordered``): where a variable's gradient is zero up
    to rounding (an attention key's bias), an optimizer that divides by the
    gradient's scale (Adam) turns that rounding into full steps, in Keras's own
    runs too. ``own_gaps``: Model.fit's reordered run against its own, as
    :func:`compare` gives them. Returns both lists re-judged and the names judged so."""
    own_weights, own_optimizer = own_gaps[0], own_gaps[1]
    own = {g.name: g.gap for g in own_weights + own_optimizer}
    noise = []

    def judged(gap):
        allowed = max(gap.allowed, NOISE_MARGIN * own.get(gap.name, 0.0))
        if gap.gap > gap.allowed and gap.gap <= allowed:
            noise.append(gap.name)
        return gap._replace(allowed=allowed)

    weights = sorted(map(judged, weights), key=lambda g: (g.equal, -g.relative))
    rounding_only = tuple(name.replace("/", "_") + "_" for name in noise)

    def slot_judged(gap):
        # The optimizer's state of a variable that moves by rounding alone (its
        # moments: the rounding, and its square) is rounding too: the
        # variable's own gap says what it does.
        if gap.name.split("/", 1)[-1].startswith(rounding_only) and not gap.equal:
            noise.append(gap.name)
            return gap._replace(allowed=gap.gap)
        return judged(gap)

    optimizer_gaps = sorted(map(slot_judged, optimizer_gaps), key=lambda g: (g.equal, -g.relative))
    return weights, optimizer_gaps, noise
