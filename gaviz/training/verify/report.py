"""What a verification found, said: its kind of verdict, the gaps, the causes and
what to do, as text in a terminal and as a table in a notebook; and what
``fit(verify=True)`` does with it."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import NamedTuple

#: ``Verification.kind``: every variable, optimizer variable, the loss and each
#: metric within float rounding of Model.fit's.
EQUAL = "equal"
#: ``Verification.kind``: different as the runs are, but equal once the model's
#: random layers are off: the updates differ as two big-batch runs with
#: different seeds do, and agree statistically.
RANDOM_DRAWS = "equal up to random draws"
#: ``Verification.kind``: something other than random draws differs.
DIFFERENT = "different"
#: The kinds of verdict, from the closest.
KINDS = (EQUAL, RANDOM_DRAWS, DIFFERENT)


class Cause(NamedTuple):
    """Why the two runs differ, as a probe found it, and what to do.

    ``explains``: the probe showed it is the whole difference (the runs made
    equal once it is taken away).
    """

    name: str
    evidence: str
    advice: str
    explains: bool = False


@dataclass
class Verification:
    """What :meth:`AccumulationTrainer.verify` found.

    Attributes:
        equal: every variable, optimizer variable, the loss and each judged
            metric within float rounding of ``Model.fit``'s.
        accumulation_steps: k.
        micro_batch_size: the micro-batch it verified at (Keras's batch: k times it).
        rows: rows trained; ``micro_batches``: the micro-batches they made.
        weights, optimizer: a ``VariableGap`` per variable, the worst first.
        logs: per entry of ``history.history``: (gaviz's, Model.fit's) value.
        causes: why they differ (empty when equal), each a ``Cause``.
        rounding: the float type whose rounding the gaps were judged by.
        seconds: how long the verification took.
        noise: variables judged against Model.fit's own gap on the same rows in
            another order, past the rounding rule: their gradient is zero up to
            rounding, which an optimizer such as Adam turns into steps.
        kind: the verdict, one of ``"equal"`` (``equal`` is True),
            ``"equal up to random draws"`` (the runs differ, and are equal once
            the random layers are off: exact statistically, as two big-batch
            runs with different seeds are; ``fit(verify=True)`` trains) and
            ``"different"`` (something else differs; ``fit(verify=True)``
            raises :class:`NotExact`).
        unjudged: log entries shown but not judged, each with why: a model
            with several outputs logs its per-output losses averaged by rows,
            where Model.fit averages its batches (said when the trainer is made).
    """

    equal: bool
    accumulation_steps: int
    micro_batch_size: int
    rows: int
    micro_batches: int
    weights: list
    optimizer: list
    logs: dict
    causes: list = field(default_factory=list)
    rounding: str = "float32"
    seconds: float = 0.0
    noise: list = field(default_factory=list)
    kind: str = ""
    unjudged: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.kind:
            self.kind = EQUAL if self.equal else DIFFERENT
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={self.kind!r}")

    @property
    def differing(self) -> list:
        """The variables (model's, then optimizer's) outside float rounding."""
        return [g for g in self.weights + self.optimizer if not g.equal]

    @property
    def gap(self) -> float:
        """The largest variable gap, as a fraction of how far training moved it."""
        gaps = [g.relative for g in self.weights]
        return max(gaps) if gaps else 0.0

    @property
    def trains(self) -> bool:
        """Whether ``fit(verify=True)`` trains after it: equal, or equal up to random draws."""
        return self.kind in (EQUAL, RANDOM_DRAWS)

    def verdict(self) -> str:
        k, b = self.accumulation_steps, self.micro_batch_size
        at = (f"{self.rows} rows, micro-batches of {b} (k={k}) against Model.fit at "
              f"batch_size={k * b}, in {self.seconds:.1f} s")
        if self.equal and self.noise:
            return (f"Equal: gaviz is Model.fit on this model ({at}), within {self.rounding}'s "
                    f"rounding; {len(self.noise)} variables ({self.noise[0]}, ...) whose gradient "
                    "is zero up to rounding are within Model.fit's own gap on the same rows "
                    "in another order (the optimizer turns that rounding into steps).")
        if self.equal:
            return (f"Equal: gaviz is Model.fit on this model ({at}); the largest gap is "
                    f"{self.gap:.2g} of the movement, within {self.rounding}'s rounding.")
        if self.kind == RANDOM_DRAWS:
            return (f"Equal up to the random draws: gaviz is Model.fit on this model with its "
                    f"random layers off ({at}); with them on, micro-batches draw other masks "
                    "than the big batch, so the updates differ as two big-batch runs with "
                    "different seeds do: exact statistically.")
        return f"Different: gaviz is not Model.fit on this model ({at})."

    def __str__(self) -> str:
        lines = [self.verdict()]
        for cause in self.causes:
            lines += [f"  cause: {cause.name}: {cause.evidence}", f"    what to do: {cause.advice}"]
        rows = self.differing or self.weights[:3]
        if rows:
            lines.append("  variable" + " " * 32 + "gap / movement   allowed")
        for gap in rows[:8]:
            mark = "" if gap.equal else "  <- differs"
            lines.append(f"  {gap.name[:38]:<40}{gap.relative:>14.3g}   "
                         f"{gap.allowed / gap.moved if gap.moved else 0:.3g}{mark}")
        for name, (ours, theirs) in self.logs.items():
            aside = f" (not judged: {self.unjudged[name]})" if name in self.unjudged else ""
            lines.append(f"  {name}: gaviz {ours:.6g}, Model.fit {theirs:.6g}{aside}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {EQUAL: "#1a7f37", RANDOM_DRAWS: "#9a6700"}.get(self.kind, "#cf222e")
        rows = (self.differing or self.weights)[:12]
        scale = max([g.relative for g in rows] + [1e-12])
        body = "".join(
            f"<tr><td><code>{html.escape(g.name)}</code></td>"
            f"<td style='text-align:right'>{g.relative:.3g}</td>"
            f"<td><div style='background:{'#1a7f37' if g.equal else '#cf222e'};height:8px;"
            f"width:{max(2, int(120 * g.relative / scale))}px'></div></td></tr>"
            for g in rows)
        causes = "".join(f"<li><b>{html.escape(c.name)}</b>: {html.escape(c.evidence)}<br>"
                         f"<i>What to do:</i> {html.escape(c.advice)}</li>" for c in self.causes)
        return (f"<div style='border-left:4px solid {colour};padding:2px 10px'>"
                f"<b style='color:{colour}'>{html.escape(self.verdict())}</b>"
                f"{'<ul>' + causes + '</ul>' if causes else ''}"
                "<table><tr><th>variable</th><th>gap / movement</th><th></th></tr>"
                f"{body}</table></div>")


class NotExact(RuntimeError):
    """``fit(verify=True)`` found gaviz different from Model.fit on this model,
    by more than random draws.

    Attributes:
        verification: the :class:`Verification`, with its causes.
    """

    def __init__(self, verification: Verification):
        self.verification = verification
        super().__init__(f"{verification}\nNothing was trained. Fit with verify=False to "
                         "train anyway.")


def required(found: Verification, verbose) -> None:
    """``fit(verify=True)``: raises :class:`NotExact` unless ``found`` trains
    (equal, or equal up to random draws), and says the verdict where ``verbose``."""
    if not found.trains:
        raise NotExact(found)
    if verbose:
        print(found.verdict())
