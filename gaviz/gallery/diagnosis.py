"""gaviz.diagnose: measure anyone's accumulation loop against the exact one and
name its defect."""

from __future__ import annotations

import base64
import functools
import html
import inspect
import io
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from gaviz.gallery import pitfalls, probes, signatures
from gaviz.training.fit import checks
from gaviz.training.trainer import AccumulationTrainer

#: For each finding: the fix in one line, and the lesson that shows the defect
#: going wrong, measured, then fixed (from the pitfall's record).
FIXES = {p.name: (p.fix, p.lesson) for p in pitfalls.GALLERY}
#: Where to look when a deviation has no name.
UNNAMED_LESSON = "03_accumulating_by_hand"

_FUNCTION_CALL = "{name}(model, optimizer, loss, micro_batches, accumulation_steps)"
_TRAINER_CALL = "{name}(model, optimizer, loss, accumulation_steps).fit(micro_batches, epochs=1)"
_EXPECTED = (
    "`subject` must be a function train_epoch(model, optimizer, loss, micro_batches, "
    "accumulation_steps) that trains one epoch in place, or a trainer class with "
    "AccumulationTrainer's constructor and fit (an entry of gaviz.PITFALLS, say)."
)


class SubjectError(RuntimeError):
    """The diagnosed subject raised an exception (chained as ``__cause__``).

    Attributes:
        subject: the subject's name.
        probe: the probe it was running.
        epoch: the epoch of that probe (1-based).
    """

    def __init__(self, message, subject, probe, epoch):
        super().__init__(message)
        self.subject, self.probe, self.epoch = subject, probe, epoch


class _Subject(NamedTuple):
    """What is diagnosed: its name, how it is called, and its epochs.

    ``epochs(model, optimizer, loss, dataset, k, epochs, probe)`` trains
    ``epochs`` epochs, yielding after each.
    """

    name: str
    call: str
    epochs: Callable


@dataclass
class Diagnosis:
    """What :func:`diagnose` found: one finding per defect it can name.

    Attributes:
        subject: the diagnosed function's or class's name.
        accumulation_steps: the k the probes were run with.
        findings: the defects' names (keys of ``gaviz.PITFALLS``), in probe order.
        details: one :class:`~gaviz.gallery.signatures.Finding` per finding: the
            probe, the measured number and that number in a sentence.
        probes: one :class:`~gaviz.gallery.signatures.Verdict` per probe.
        unexplained: deviations from the exact trainer that no signature
            matches, in sentences.
        unused: features the subject ignores (a model's regularization
            losses, an optimizer's clipping); noted, not counted against it.
        changes_weights: False when the subject left every weight as it was.
        seconds: how long the diagnosis took.
    """

    subject: str
    accumulation_steps: int
    findings: list = field(default_factory=list)
    details: list = field(default_factory=list)
    probes: list = field(default_factory=list)
    unexplained: list = field(default_factory=list)
    unused: list = field(default_factory=list)
    changes_weights: bool = True
    seconds: float = float("nan")

    @property
    def exact(self) -> bool:
        """True when the subject matches the exact trainer on every probe."""
        return self.changes_weights and not self.findings and not self.unexplained

    def _headline(self) -> str:
        probes_run = sum(v.not_run is None for v in self.probes)
        if not self.changes_weights:
            verdict = "does not change the weights"
        elif self.exact:
            verdict = f"exact on all {probes_run} probes"
        else:
            count = len(self.findings) + len(self.unexplained)
            verdict = f"{count} defect{'s' * (count != 1)}"
        return (f"{self.subject} against the exact trainer "
                f"(accumulation_steps={self.accumulation_steps}): {verdict}")

    def _lines(self) -> list:
        """(label, sentence, fix) for each finding, unexplained deviation and note."""
        out = []
        if not self.changes_weights:
            out.append(("unchanged", "no weight moved in the probe's full windows",
                         "apply the window's gradients to model.trainable_variables with "
                         f"the optimizer it is given (lesson {UNNAMED_LESSON})"))
        for finding in self.details:
            fix, lesson = FIXES[finding.name]
            # "; see lesson": a fix may end in parentheses of its own.
            out.append((finding.name, finding.measured, f"{fix}; see lesson {lesson}"))
        for sentence in self.unexplained:
            out.append(("unexplained", sentence,
                        "no pitfall in the gallery has this signature; compare the loop with "
                        f"lesson {UNNAMED_LESSON}"))
        for feature in self.unused:
            out.append(("note", f"ignores {feature}", "not counted against it"))
        return out

    def summary(self) -> str:
        """A headline, then one line per finding with its measured number and the fix."""
        rows = [self._headline()]
        # A note's sentence may end in parentheses ("(model.losses)"): its remark follows
        # after a semicolon, never in a second pair.
        rows += [f"- {label}: {sentence}. Fix: {fix}." if label != "note"
                 else f"- {label}: {sentence}; {fix}." for label, sentence, fix in self._lines()]
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        names = ", ".join(self.findings) or ("exact" if self.exact else "not exact")
        return f"<Diagnosis of {self.subject}: {names}>"

    def plot(self, figure=None):
        """The damage: how far each micro-batch's weight moved, exact = 1, per probe.

        Args:
            figure: a matplotlib ``Figure`` to draw in; by default a new one,
                made without pyplot.

        Returns:
            The figure.
        """
        from matplotlib.figure import Figure

        shown = [v for v in self.probes if len(v.contributions)]
        if figure is None:
            figure = Figure(figsize=(3.2 * max(len(shown), 1), 2.8))
        axes = figure.subplots(1, max(len(shown), 1), squeeze=False)[0]
        for ax, verdict in zip(axes, shown):
            values = np.nan_to_num(verdict.contributions, nan=0.0)
            colors = ["C0" if signatures.near(v, 1) else "C3" for v in values]
            ax.bar(range(len(values)), values, color=colors)
            ax.scatter(range(len(values)), values, color=colors, s=10, zorder=3)  # shows 0s
            ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
            ax.set_xticks(range(len(values)))
            ax.set_xticklabels(verdict.labels, rotation=90, fontsize="x-small")
            ax.set_title(f"{verdict.probe}: {verdict.verdict}", fontsize="small")
        axes[0].set_ylabel("weight moved / exact move\n(1 = exact)")
        figure.suptitle(self._headline(), fontsize="small")
        figure.tight_layout()
        return figure

    def _repr_html_(self) -> str:
        escape = html.escape
        rows = "".join(
            f"<tr><td>{escape(v.probe)}</td><td>{escape(v.setup)}</td>"
            f"<td>{escape(v.measured)}</td><td><b>{escape(v.verdict)}</b></td></tr>"
            for v in self.probes)
        items = "".join(f"<li><b>{escape(label)}</b>: {escape(sentence)}. <i>Fix:</i> "
                        f"{escape(fix)}.</li>" if label != "note" else
                        f"<li><b>{escape(label)}</b>: {escape(sentence)}; {escape(fix)}.</li>"
                        for label, sentence, fix in self._lines())
        buffer = io.BytesIO()
        self.plot().savefig(buffer, format="png", dpi=72)
        picture = base64.b64encode(buffer.getvalue()).decode("ascii")
        return (f"<div><p><b>{escape(self._headline())}</b></p><ul>{items}</ul>"
                "<table><tr><th>probe</th><th>setup</th><th>measured</th><th>verdict</th></tr>"
                f"{rows}</table><img src=\"data:image/png;base64,{picture}\"/></div>")


def diagnose(subject, accumulation_steps: int = 4, seed: int = 0) -> Diagnosis:
    """Runs an accumulation loop and the exact trainer on small probes; names its defects.

    The subject is either a function that trains one epoch in place::

        def train_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
            variables = model.trainable_variables
            sums, count, steps = [tf.zeros_like(v) for v in variables], 0, 0
            for x, y in micro_batches:
                with tf.GradientTape() as tape:
                    summed = tf.reduce_sum(loss.call(y, model(x, training=True)))
                sums = [s + g for s, g in zip(sums, tape.gradient(summed, variables))]
                count, steps = count + len(x), steps + 1
                if steps == accumulation_steps:
                    optimizer.apply_gradients(zip([s / count for s in sums], variables))
                    sums, count, steps = [tf.zeros_like(v) for v in variables], 0, 0
            # (a partial window is still in `sums` here: diagnose will say so)

    or a trainer class with :class:`~gaviz.AccumulationTrainer`'s constructor
    (any entry of ``gaviz.PITFALLS``, ``AccumulationTrainer`` itself, a
    subclass), which is built as ``cls(model, optimizer, loss, accumulation_steps)``
    and trained with ``fit(micro_batches, epochs=1)`` once per epoch.

    diagnose calls the function positionally, once per epoch, with:

    - ``model``: a small Keras model it builds (linear, no bias; one probe adds
      an L2-penalized kernel, so ``model.losses`` is not empty there);
    - ``optimizer``: a fresh ``keras.optimizers.SGD`` the function should step
      (with ``global_clipnorm``: far above any gradient except in the clipping
      probe; with ``use_ema=True`` in the ema probe). A function may build its
      own from ``optimizer.get_config()`` (``Model.fit`` with Keras's
      ``gradient_accumulation_steps`` does); steps per window are then not
      counted, and the moving average is read from ``model.optimizer``;
    - ``loss``: a ``keras.losses.MeanSquaredError()``;
    - ``micro_batches``: a ``tf.data.Dataset`` of ``(x, y)`` float32
      micro-batches, to iterate in order (a loop may also accept
      ``(x, y, sample_weight)``: diagnose never sends weights);
    - ``accumulation_steps``: the int given here.

    Eager loops, ``tf.function`` loops and ``Model.fit`` all work. Each probe
    runs the subject and the exact trainer from the same weights: three full
    windows of equal micro-batches; one window of ragged micro-batches (with a
    weight penalty); a full and a partial window over two epochs; one window
    under clipping; three full windows again, with a moving average of the
    weights (``use_ema=True``). Each micro-batch moves one weight of its own, so
    with SGD the ratio of the subject's move to the exact trainer's says how
    much that micro-batch counted (1 when exact); each defect has its own ratios
    (:mod:`gaviz.gallery.signatures`). A defect that wipes or freezes the weights ends
    the diagnosis after the first probe; a gallery trainer is not run on the
    probes whose optimizer its pitfall refuses. Seeded, offline, a few seconds.

    Args:
        subject: the function or trainer class to diagnose.
        accumulation_steps: micro-batches per window, an int >= 2 (with 1
            there is no window to get wrong).
        seed: seeds the probes' data and initial weights.

    Returns:
        A :class:`Diagnosis`: ``exact``, ``findings``, ``summary()``, and a
        table with a picture in a notebook.

    Raises:
        TypeError: ``subject`` is neither such a function nor such a class,
            or cannot take those arguments.
        ValueError: ``accumulation_steps`` is not an int >= 2.
        SubjectError: the subject raised (its exception is chained), or it
            refused the optimizer of every probe.
    """
    start = time.perf_counter()
    k = checks.check_positive_int("accumulation_steps", accumulation_steps)
    if k < 2:
        raise ValueError("`accumulation_steps` must be an integer >= 2 for diagnose (with 1 "
                         f"there is no window to get wrong). Received: accumulation_steps={k}")
    candidate = _as_subject(subject)

    def observe(probe):
        return probes.observe(_for_probe(candidate, probe), probe, k)

    judgement = signatures.judge(zip(probes.make_probes(k, seed), _exact_runs(k, seed)),
                                 observe, k)
    if all(v.not_run is signatures.Stop.REFUSED for v in judgement.verdicts):
        first = judgement.verdicts[0]
        raise SubjectError(f"`subject` {candidate.name} refuses the optimizer of every probe of "
                           f"diagnose (keras.optimizers.SGD): {first.measured}",
                           candidate.name, first.probe, 1)
    return Diagnosis(
        subject=candidate.name,
        accumulation_steps=k,
        findings=[f.name for f in judgement.findings],
        details=list(judgement.findings),
        probes=list(judgement.verdicts),
        unexplained=list(judgement.unexplained),
        unused=list(judgement.unused),
        changes_weights=judgement.changes_weights,
        seconds=time.perf_counter() - start,
    )


@functools.lru_cache(maxsize=4)
def _exact_runs(k, seed):
    """The exact trainer's observations of every probe: the same for every subject.

    Kept for the process (a few kilobytes), so a second diagnosis with the same
    k and seed only runs its subject; tracing the exact trainer once per probe
    is most of a diagnosis's time.
    """
    exact = _as_subject(AccumulationTrainer)
    return tuple(probes.observe(_for_probe(exact, probe), probe, k)
                 for probe in probes.make_probes(k, seed))


def _as_subject(subject) -> _Subject:
    """Checks ``subject`` once, at the boundary, and says how to run it."""
    if isinstance(subject, type):
        name = subject.__name__
        if not callable(getattr(subject, "fit", None)):
            raise TypeError(f"{_EXPECTED} Received: subject={name}, a class without fit")
        _check_arguments(subject, name, 4, "model, optimizer, loss, accumulation_steps")
        call = _TRAINER_CALL.format(name=name)
        return _Subject(name, call, _trainer_epochs(subject, name, call))
    if not callable(subject):
        hint = " (a trainer instance: pass its class)" if hasattr(subject, "fit") else ""
        raise TypeError(f"{_EXPECTED} Received: subject={subject!r} of type "
                        f"{type(subject).__name__}{hint}")
    name = getattr(subject, "__qualname__", None) or type(subject).__name__
    _check_arguments(subject, name, 5,
                     "model, optimizer, loss, micro_batches, accumulation_steps")
    call = _FUNCTION_CALL.format(name=name)
    return _Subject(name, call, _function_epochs(subject, name, call))


def _check_arguments(subject, name, count, expected):
    try:
        signature = inspect.signature(subject)
    except (TypeError, ValueError):  # builtins and some C callables: try it instead
        return
    try:
        signature.bind(*range(count))
    except TypeError as error:
        raise TypeError(f"{_EXPECTED} Received: subject={name}{signature}, which cannot be "
                        f"called with the {count} arguments ({expected}): {error}") from None


def _function_epochs(function, name, call):
    def epochs(model, optimizer, loss, dataset, k, count, probe):
        for epoch in range(1, count + 1):
            with _blame(name, call, probe, epoch):
                function(model, optimizer, loss, dataset, k)
            yield

    return epochs


def _trainer_epochs(cls, name, call):
    def epochs(model, optimizer, loss, dataset, k, count, probe):
        with _blame(name, call, probe, 1):
            trainer = cls(model, optimizer, loss, k)
        # Quiet (no progress bar) when the subject's fit takes Keras's `verbose`.
        quiet = {"verbose": 0} if _accepts(trainer.fit, "verbose") else {}
        for epoch in range(1, count + 1):
            with _blame(name, call, probe, epoch):
                trainer.fit(dataset, epochs=1, **quiet)
            yield

    return epochs


def _accepts(function, name) -> bool:
    parameters = inspect.signature(function).parameters.values()
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


def _for_probe(candidate, probe):
    def epochs(model, optimizer, loss, dataset, k, count):
        return candidate.epochs(model, optimizer, loss, dataset, k, count, probe.name)

    return epochs


class _blame:
    """Turns the subject's exceptions into a SubjectError naming it and its call.

    A ``FloatingPointError`` passes through: a trainer refusing a non-finite
    update is a measurement, not a failure; so does a gallery trainer's
    ``OptimizerRefused``: that probe's optimizer cannot show its pitfall.
    """

    def __init__(self, name, call, probe, epoch):
        self.name, self.call, self.probe, self.epoch = name, call, probe, epoch

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if not isinstance(error, Exception) or isinstance(
                error, (FloatingPointError, pitfalls.OptimizerRefused)):
            return False
        raise SubjectError(
            f"`subject` {self.name} raised {type(error).__name__} in diagnose's "
            f"{self.probe!r} probe (epoch {self.epoch}): {error}. diagnose runs it as "
            f"{self.call}, with model a keras.Model, optimizer a fresh keras.optimizers.SGD, "
            "loss a keras.losses.MeanSquaredError, micro_batches a tf.data.Dataset of (x, y) "
            "and accumulation_steps an int; it must train one epoch in place.",
            self.name, self.probe, self.epoch,
        ) from error

