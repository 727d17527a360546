"""From what the probes measured to named defects: the signatures diagnose looks for.

Pure functions of the probes' observations (see :mod:`gaviz.gallery.probes`): each
probe's contributions (how far each weight moved, as a multiple of the exact
trainer's move) are compared with the numbers each defect predicts. With SGD
and one weight per micro-batch those predictions are exact; they are the rows
of :data:`SIGNATURES`, one per pitfall of ``gaviz.PITFALLS``, keyed by its name.

Every probe is read by a judge of one signature, ``judge(probe, subject,
exact, k, context) -> (Outcome, Context)``; :data:`READINGS` holds, per probe,
its judge and the picture of its contributions. Later probes are read in the
light of earlier findings, the :class:`Context`: a subject that also steps the
optimizer on every micro-batch adds ``N_window / n_i`` to micro-batch ``i``'s
contribution, and one that never divides by the sample count scales every
window by k. A missing normalization explains the mean of means and the
under-scaled tail at once (a constant divisor, of 1, instead of the window's
count): those two are then not reported separately. A subject that wipes or
freezes the weights on the windows probe (a :class:`Stop`) would read the same
on every later probe: those are not run; nor is a probe whose optimizer a
gallery trainer refuses (its pitfall needs another). The ``ema`` probe reads
the optimizer's moving average, not the weights: only where the windows probe
saw each window's gradient move the weights once.

A number matches a signature within ``TOLERANCE x (1 + |signature|)``.
"""

from __future__ import annotations

import enum
from typing import Callable, NamedTuple

import numpy as np

from gaviz.gallery import pitfalls, probes
from gaviz.gallery.pitfalls import OptimizerRefused
from gaviz.gallery.probes import Observation, Probe

#: Contributions are ratios of weight moves of about 0.1 / k on weights near 1,
#: so float32 rounding moves them by about 1e-6 (at most 5e-6 measured, over the
#: gallery, Keras's built-in and the tests' loops); the closest two signatures
#: are 1 apart (k and k + 1) or 1/k of a window apart. 1e-3 is far from both.
TOLERANCE = 1e-3


class Signature(NamedTuple):
    """What one defect does to one probe's contributions.

    Attributes:
        name: a key of ``gaviz.PITFALLS``.
        probe: the probe that shows it.
        reads: the contributions it predicts, k micro-batches per window.
    """

    name: str
    probe: str
    reads: str


#: Every defect diagnose names: each pitfall record's probe and signature
#: (:data:`gaviz.gallery.pitfalls.GALLERY`, the one place a pitfall is described).
SIGNATURES = {p.name: Signature(p.name, p.probe, p.signature)
              for p in pitfalls.GALLERY if p.probe}


class Finding(NamedTuple):
    """One named defect and the number that shows it.

    Attributes:
        name: a key of ``gaviz.PITFALLS`` (and of :data:`SIGNATURES`).
        probe: the probe that showed it.
        value: the measured number (e.g. 4.0 for an update 4x the exact one).
        measured: that number in a sentence.
    """

    name: str
    probe: str
    value: float
    measured: str


def _found(name: str, value, measured: str) -> Finding:
    """The finding of signature ``name``, on the probe its row names."""
    return Finding(name, SIGNATURES[name].probe, value, measured)


class Stop(enum.Enum):
    """Why a probe was not run: the windows probe left nothing to measure in
    later ones (WIPED, UNCHANGED), or the subject refused its optimizer."""

    WIPED = "the subject wipes the weights"
    UNCHANGED = "the subject does not change the weights"
    REFUSED = "the subject refuses its optimizer"


class Verdict(NamedTuple):
    """One probe's row in the report.

    Attributes:
        probe, setup: the probe's name and what it feeds.
        measured: its numbers, in words.
        verdict: ``"exact"``, the names it showed, or why it was not judged.
        contributions: how far each micro-batch's weight moved (on the ``ema``
            probe: its moving average), as a multiple of the exact trainer's
            move (1 is exact), then the penalized weights for the ``ragged``
            probe; empty if not run.
        labels: one label per contribution.
        not_run: the :class:`Stop` that kept the probe from running, else None.
            (REFUSED: ``measured`` says what the subject needs.)
    """

    probe: str
    setup: str
    measured: str
    verdict: str
    contributions: np.ndarray
    labels: list
    not_run: Stop | None = None


class Judgement(NamedTuple):
    """Everything the probes showed about a subject."""

    findings: list  # of Finding, in probe order
    unexplained: list  # sentences: deviations no signature matches
    unused: list  # features the subject ignores (regularization, clipping, moving average)
    changes_weights: bool
    verdicts: list  # of Verdict, one per probe


class Context(NamedTuple):
    """What earlier probes established, to read later ones against.

    Attributes:
        micro_part: a full window's contribution from optimizer steps on each
            micro-batch (k with ``update_every_micro_step``, else 0).
        window_scale: a full window's contribution from its own update (1
            exact, k without normalization).
        missing_normalization: whether the windows probe found it.
        stop: why later probes are not run, else None.
        each_window_once: whether each window's gradient moved the weights
            once, at its update, and no other time (not so after a missing
            reset or windows that read no scale): the ``ema`` probe reads the
            moving average of such weights only.
    """

    micro_part: float = 0.0
    window_scale: float = 1.0
    missing_normalization: bool = False
    stop: Stop | None = None
    each_window_once: bool = True


class Outcome(NamedTuple):
    """What a probe, or one of its judgements, found.

    Attributes:
        measured: the probe's numbers, in words (empty for one judgement's part).
        findings: :class:`Finding` objects.
        unexplained: deviations no signature matches, in sentences.
        unused: features the subject ignores.
        note: replaces "exact" in the verdict when nothing was found.
    """

    measured: str = ""
    findings: tuple = ()
    unexplained: tuple = ()
    unused: tuple = ()
    note: str = ""

    @classmethod
    def merged(cls, measured: str, *parts: Outcome) -> Outcome:
        """One probe's outcome from its judgements' parts, in their order."""
        return cls(measured,
                   [f for part in parts for f in part.findings],
                   [u for part in parts for u in part.unexplained],
                   [u for part in parts for u in part.unused],
                   "; ".join(part.note for part in parts if part.note))

    @property
    def verdict(self) -> str:
        """The names it showed, else its note, else ``"exact"``."""
        names = [f.name for f in self.findings]
        if self.unexplained:
            names.append("unexplained")
        return ", ".join(names) or self.note or "exact"


#: ``judge(probe, subject, exact, k, context) -> (outcome, context for later probes)``.
Judge = Callable[[Probe, Observation, Observation, int, Context], "tuple[Outcome, Context]"]


class Reading(NamedTuple):
    """How one probe is read.

    Attributes:
        judge: names what its observations show (a :data:`Judge`).
        labels: ``labels(probe, k)``, one per weight its picture shows.
        shown: ``shown(probe, contributions)``, the contributions its picture shows.
        view: ``view(observation)``, the weights its picture compares: the
            model's after each epoch, or (``probes.averaged``) the moving average.
    """

    judge: Judge
    labels: Callable[[Probe, int], list]
    shown: Callable[[Probe, np.ndarray], np.ndarray]
    view: Callable[[Observation], Observation] = lambda observation: observation


def _times(ratio) -> str:
    """A measured ratio as a sentence says it: ``"1.50x"``; a tiny one ``"less than 0.01x"``,
    never ``"0.00x"``."""
    return f"{ratio:.2f}x" if abs(ratio) >= 0.005 else "less than 0.01x"


def _moved(ratio) -> str:
    """``"moved 0.50x"``, or ``"barely moved, less than 0.01x"`` for a tiny ratio; the
    caller goes on: ``f"its weights {_moved(r)} as far as the exact trainer's"``."""
    return f"moved {ratio:.2f}x" if abs(ratio) >= 0.005 else "barely moved, less than 0.01x"


def near(value, target) -> bool:
    """Whether a measured number matches a signature's, up to float32 rounding."""
    return bool(np.isfinite(value) and abs(value - target) <= TOLERANCE * (1 + abs(target)))


def judge(runs, observe: Callable[[Probe], Observation], accumulation_steps: int) -> Judgement:
    """Names the defects the probes show.

    Args:
        runs: ``(probe, exact_observation)`` for each probe of
            :func:`gaviz.gallery.probes.make_probes`, in its order.
        observe: runs the subject on a probe; not called for the probes
            after a :class:`Stop`. A gallery trainer that refuses the probe's
            optimizer raises ``pitfalls.OptimizerRefused``:
            that probe is not run.
        accumulation_steps: the k the probes were run with.
    """
    k = accumulation_steps
    findings, unexplained, unused, verdicts = [], [], [], []
    context = Context()
    for probe, exact in runs:
        if context.stop is not None:
            verdicts.append(Verdict(probe.name, probe.setup, "", f"not run: {context.stop.value}",
                                    np.array([]), [], context.stop))
            continue
        try:
            subject = observe(probe)
        except OptimizerRefused as refusal:
            verdicts.append(Verdict(probe.name, probe.setup, str(refusal),
                                    f"not run: the subject needs {refusal.needs}",
                                    np.array([]), [], Stop.REFUSED))
            continue
        outcome, context = read(probe, subject, exact, k, context)
        findings += outcome.findings
        unexplained += outcome.unexplained
        unused += outcome.unused
        contributions, labels = _picture(probe, subject, exact, k)
        verdicts.append(Verdict(probe.name, probe.setup, outcome.measured, outcome.verdict,
                                contributions, labels))
    changes = context.stop is not Stop.UNCHANGED
    return Judgement(findings, unexplained, unused, changes, verdicts)


def read(probe: Probe, subject: Observation, exact: Observation, k: int,
         context: Context) -> tuple[Outcome, Context]:
    """One probe's outcome, by its judge, unless the subject's run went wrong."""
    trouble = _trouble(subject)
    if trouble:
        return Outcome(unexplained=[f"{probe.name} probe: {trouble}"]), context
    return READINGS[probe.name].judge(probe, subject, exact, k, context)


def stop_reason(subject: Observation, exact: Observation) -> Stop | None:
    """Why the windows probe leaves nothing to measure in later ones, or None.

    A subject whose updates zero every weight, or that moves none, would read
    the same on every later probe: those are not run.
    """
    if _trouble(subject):
        return None
    final = subject.after_epoch[-1]
    if not np.any(final) and np.any(exact.after_epoch[-1]):
        return Stop.WIPED
    if np.array_equal(final, subject.start):
        return Stop.UNCHANGED
    return None


def _trouble(subject):
    if subject.error:
        return f"the run stopped: {subject.error}"
    if not all(np.all(np.isfinite(w)) for w in subject.after_epoch):
        return "the weights became non-finite"
    return None


def _picture(probe, subject, exact, k):
    """The probe's contributions and their labels, for the table's picture."""
    reading = READINGS[probe.name]
    subject, exact = reading.view(subject), reading.view(exact)
    if not subject.after_epoch:
        return np.array([]), []
    return (reading.shown(probe, probes.contributions(subject, exact)),
            reading.labels(probe, k))


def _micro_batches_shown(probe, values):
    return values[: len(probe.sizes)]


# ------------------------------------------------------------------ windows


def _judge_windows(probe, subject, exact, k, context):
    """Scale, steps per window, re-applied windows and wiped weights.

    The context it returns is read from this probe alone.
    """
    stop = stop_reason(subject, exact)
    if stop is not None:
        return _stopped_windows(stop), Context(stop=stop)

    windows = probes.contributions(subject, exact)[: probes.WINDOWS * k].reshape(-1, k)
    per_window = windows.mean(axis=1)
    scale = per_window[-1]  # the last window is applied once by any subject
    steps = subject.optimizer_steps / probes.WINDOWS if subject.optimizer_steps else None
    steps_text = "not counted" if steps is None else f"{steps:.2f}"
    shares = ", ".join(f"{w:.2f}" for w in per_window)
    measured = f"windows {shares}x exact; optimizer steps per window: {steps_text}"
    unreadable = _unreadable_windows(measured, windows, scale)
    if unreadable is not None:
        return unreadable
    profile = _judge_profile(per_window / scale)
    scaled, context = _judge_scale(steps, scale, k)
    if profile.findings or profile.unexplained:  # some window moved the weights again
        context = context._replace(each_window_once=False)
    return Outcome.merged(measured, profile, scaled), context


def _window_labels(probe, k):
    return [f"w{i // k + 1}.{i % k + 1}" for i in range(len(probe.sizes))]


def _stopped_windows(stop):
    """The windows probe's outcome when :func:`stop_reason` gave ``stop``."""
    if stop is Stop.WIPED:
        finding = _found("zeroed_weights", 0.0,
                         "every weight is 0 after the probe's updates (the exact trainer's "
                         "are not): the updates wipe the model")
        return Outcome("every weight 0", [finding])
    return Outcome(f"no weight moved in {probes.WINDOWS} windows", note="unchanged")


def _unreadable_windows(measured, windows, scale):
    """(outcome, context) when no scale per window can be read, else None.

    Every signature scales whole windows: micro-batches of one window that count
    differently, or a last window never applied, match none of them.
    """
    if not all(near(v, row.mean()) for row in windows for v in row):
        spread = ", ".join(f"{row.min():.2f}-{row.max():.2f}" for row in windows)
        return Outcome(measured, unexplained=[
            f"windows probe: micro-batches of one window count differently (per window: "
            f"{spread} times their exact share)"]), Context(window_scale=scale,
                                                             each_window_once=False)
    if near(scale, 0):
        return Outcome(measured, unexplained=[
            "windows probe: the last full window is never applied"]), Context(
                each_window_once=False)
    return None


def _judge_profile(profile):
    """missing_reset when earlier windows count more than the last one, and less each."""
    if all(near(p, 1) for p in profile):
        return Outcome()
    if profile[0] > 1 and np.all(np.diff(profile) < 0):
        return Outcome(findings=[_found(
            "missing_reset", float(profile[0]),
            f"window 1's gradient counts {_times(profile[0])} in the probe's "
            f"{probes.WINDOWS} updates (exact: once): each update re-applies the earlier "
            "windows")])
    shares = ", ".join(f"{p:.2f}" for p in profile)
    return Outcome(unexplained=[f"windows probe: the windows count {shares} times the last one"])


def _judge_scale(steps, scale, k):
    """Optimizer steps per window and how far one window moves the weights.

    Returns:
        The part of the outcome, and the context later probes are read against.
    """
    if steps is not None and steps > 1 and not near(steps, 1):
        return _judge_micro_steps(steps, scale, k)
    findings, unexplained = [], []
    context = Context(window_scale=scale)
    if steps is not None and steps < 1 and not near(steps, 1):
        unexplained.append(f"windows probe: {steps:.2f} optimizer steps per window")
    if near(scale, 1):
        pass
    elif near(scale, k):
        findings.append(_found(
            "missing_normalization", float(scale),
            f"every update is {_times(scale)} the exact one (k = {k}): the micro-batches' "
            "mean losses are summed, not divided"))
        context = Context(window_scale=scale, missing_normalization=True)
    elif steps is None and near(scale, k + 1):
        findings.append(_found(
            "update_every_micro_step", float(scale),
            f"every window moves the weights {_times(scale)} as far as the exact update, as "
            f"{k} micro-batch steps and a window step do (optimizer steps not counted: the "
            "subject does not step the optimizer it is given)"))
        context = Context(micro_part=k, window_scale=1.0)
    else:
        unexplained.append(f"windows probe: every update is {_times(scale)} the exact one")
    return Outcome(findings=findings, unexplained=unexplained), context


def _judge_micro_steps(steps, scale, k):
    """update_every_micro_step, counted: more than one optimizer step per window.

    Later probes subtract the k micro-batch steps from each window's move.
    """
    finding = _found(
        "update_every_micro_step", steps,
        f"{steps:.2f} optimizer steps per window of {k} micro-batches (exact: 1)")
    if near(scale, k + 1) or near(scale, k):  # with or without a window update
        return Outcome(findings=[finding]), Context(micro_part=k, window_scale=scale - k)
    unexplained = [f"windows probe: with {steps:.2f} steps per window the "
                   f"weights move {_times(scale)} as far as the exact update"]
    return (Outcome(findings=[finding], unexplained=unexplained),
            Context(micro_part=k, window_scale=max(scale - k, 0.0)))


# ------------------------------------------------------------------- ragged


class _SizeFit(NamedTuple):
    """How the micro-batches of a ragged window counted, against their sizes.

    The fit is ``contribution_i = a * (N / k) / n_i + b`` for micro-batches of
    ``n_i`` samples, N in all: b = 1 for an exact window, a = 1 for a mean of means.

    Attributes:
        sizes: each micro-batch's sample count.
        contributions: each micro-batch's contribution (1 is exact).
        a: the size-dependent part, less the subject's own micro-batch steps.
        b: the part every sample shares.
        per_sample: how many times one in the largest micro-batch a sample in the
            smallest counts.
        error: how far the update is from the exact one, relative to its length.
    """

    sizes: np.ndarray
    contributions: np.ndarray
    a: float
    b: float
    per_sample: float
    error: float

    @property
    def smallest(self):
        return self.sizes.min()

    @property
    def largest(self):
        return self.sizes.max()


def _judge_ragged(probe, subject, exact, k, context):
    """Whether a sample's weight depends on its micro-batch's size; the penalty's count."""
    all_contributions = probes.contributions(subject, exact)
    fit = _fit_sizes(probe, all_contributions, subject, exact, k, context.micro_part)
    penalty = float(np.mean(all_contributions[len(probe.initial):]))
    measured = (f"a sample in a micro-batch of {fit.smallest:.0f} counts {_times(fit.per_sample)} "
                f"one in a micro-batch of {fit.largest:.0f}; update off by {fit.error:.0%}; "
                f"penalty {_times(penalty)} exact")
    sizes = _judge_sizes(fit, context)
    penalized = _judge_penalty(penalty, k)
    # An unused penalty is the verdict only when nothing else was found.
    if penalized.unused and not sizes.findings and not sizes.unexplained:
        penalized = penalized._replace(note="penalty not used")
    return Outcome.merged(measured, sizes, penalized), context


def _ragged_labels(probe, k):
    return [f"n={n}" for n in probe.sizes] + ["L2"] * probes.PENALIZED_WEIGHTS


def _ragged_shown(probe, values):
    """The data weights' contributions, then the penalized weights'."""
    return np.concatenate([values[: len(probe.sizes)], values[len(probe.initial):]])


def _fit_sizes(probe, all_contributions, subject, exact, k, micro_part):
    """Fits the data weights' contributions to their micro-batches' sizes."""
    sizes = np.array(probe.sizes, dtype=np.float64)
    data = all_contributions[: len(sizes)]
    # The subject's own micro-batch steps add k to a: taken off, as micro_part.
    basis = np.stack([sizes.sum() / (k * sizes), np.ones_like(sizes)], axis=1)
    (a, b), *_ = np.linalg.lstsq(basis, data, rcond=None)
    small, large = sizes.argmin(), sizes.argmax()
    with np.errstate(divide="ignore", invalid="ignore"):
        per_sample = data[small] / data[large]
    moves = [o.after_epoch[0][: len(sizes)] - o.start[: len(sizes)] for o in (subject, exact)]
    error = float(np.linalg.norm(moves[0] - moves[1]) / np.linalg.norm(moves[1]))
    return _SizeFit(sizes, data, a - micro_part, b, per_sample, error)


def _judge_sizes(fit, context):
    """mean_of_means when each micro-batch weighs the same, whatever its size."""
    scale = context.window_scale
    if near(scale, 0) or not np.isfinite(scale):
        return Outcome(note="size dependence not judged")
    a, b = fit.a / scale, fit.b / scale
    sizes_text = ", ".join(f"{n:.0f}" for n in fit.sizes)
    if near(a, 0) and near(b, 1):
        return Outcome()
    if near(a, 1) and near(b, 0):
        if context.missing_normalization:
            return Outcome(note="as missing_normalization")
        return Outcome(findings=[_found(
            "mean_of_means", float(fit.per_sample),
            f"micro-batches of {sizes_text} samples weigh the same in the update: a "
            f"sample in a micro-batch of {fit.smallest:.0f} counts {_times(fit.per_sample)} one "
            f"in a micro-batch of {fit.largest:.0f} (the update is off by {fit.error:.0%})")])
    return Outcome(unexplained=[
        f"ragged probe: micro-batches of {sizes_text} samples "
        f"count {', '.join(f'{c:.2f}' for c in fit.contributions)} times their exact share"])


def _judge_penalty(penalty, k):
    """regularizer_every_micro_step when the penalty counts once per micro-batch."""
    if near(penalty, 0):
        return Outcome(unused=["the model's regularization losses (model.losses)"])
    if near(penalty, 1):
        return Outcome()
    if near(penalty, k):
        return Outcome(findings=[_found(
            "regularizer_every_micro_step", penalty,
            f"the weight penalty moves the weights {_times(penalty)} as far as the exact update: "
            f"it is added once per micro-batch ({k} per update), not once per update")])
    return Outcome(unexplained=[f"ragged probe: the weight penalty counts {penalty:.2f} times "
                              "per update (exact: once)"])


# --------------------------------------------------------------------- tail


def _judge_tail(probe, subject, exact, k, context):
    """What happens to the partial window: applied, under-scaled, dropped or carried."""
    m = len(probe.sizes) - k
    samples = sum(probe.sizes[k:])
    first = probes.contributions(subject, exact, epoch=1)[k : k + m]
    second = probes.contributions(subject, exact, epoch=2)[k : k + m]
    # The subject's own micro-batch steps count m for a window of m micro-batches.
    tail = float(np.mean(first)) - context.micro_part * m / k
    after_two = float(np.mean(second))
    scale = context.window_scale
    measured = (f"partial window {_times(tail / scale if scale else tail)} exact after epoch 1, "
                f"its weights {_times(after_two)} exact after epoch 2")
    what = f"the partial window ({m} of {k} micro-batches, {samples} samples)"
    findings, unexplained, note = [], [], ""
    if near(tail, scale):
        pass
    elif near(tail, scale * m / k):
        if context.missing_normalization:
            note = "as missing_normalization"
        else:
            findings.append(_found(
                "under_scaled_tail", tail / scale,
                f"{what} moves the weights {_times(tail / scale)} as far as the exact update: it "
                f"is divided as if it held {k} micro-batches"))
    elif near(tail, 0):
        if near(after_two, 0) or context.micro_part:
            findings.append(_found(
                "dropped_tail", after_two,
                f"{what} never reaches the weights: after 2 epochs its weights "
                f"{_moved(after_two)} as far as the exact trainer's"))
        else:
            findings.append(_found(
                "carried_tail", after_two,
                f"{what} is not applied at the end of the epoch but in the next one, mixed "
                f"with its first micro-batches: after epoch 1 its weights barely moved, after "
                f"epoch 2 they {_moved(after_two)} as far as the exact trainer's"))
    else:
        unexplained.append(f"tail probe: {what} counts {tail:.2f} times its exact share")
    return Outcome(measured, findings, unexplained, note=note), context


def _tail_labels(probe, k):
    partial = len(probe.sizes) - k
    return [f"full {i + 1}" for i in range(k)] + [f"tail {i + 1}" for i in range(partial)]


# ----------------------------------------------------------------- clipping


def _judge_clipping(probe, subject, exact, k, context):
    """Whether the window is clipped once, each micro-batch is, or nothing is."""
    used = len(probe.sizes)
    moves = [o.after_epoch[0][:used] - o.start[:used] for o in (subject, exact)]
    ratio = float(np.linalg.norm(moves[0]) / np.linalg.norm(moves[1]))
    measured = f"update {_times(ratio)} as long as the clip allows"
    if context.micro_part:
        return Outcome(measured, note="not judged: the subject steps on every micro-batch"), context
    if near(ratio, 1):
        return Outcome(measured), context
    if near(ratio, 1 / np.sqrt(k)):
        return Outcome(measured, [_found(
            "per_micro_batch_clipping", ratio,
            f"with every micro-batch's gradient above global_clipnorm, the update is "
            f"{_times(ratio)} as long as the clip allows, 1/sqrt({k}): each micro-batch is "
            "clipped before accumulating")]), context
    if ratio > 1:
        return Outcome(measured, unused=["the optimizer's clipping (global_clipnorm)"],
                       note="clipping not used"), context
    return Outcome(measured, unexplained=[
        f"clipping probe: the update is {_times(ratio)} as long as the clip allows"]), context


def _numbered_labels(probe, k):
    return [f"{i + 1}" for i in range(len(probe.sizes))]


# ---------------------------------------------------------------------- ema


def _judge_ema(probe, subject, exact, k, context):
    """How many times the moving average moves per update: once, or once per micro-step.

    A weight that moves only in window 2, by ``d``, ends ``m^(1 + n) d`` ahead of
    its average when the average moves n times in update 3 (momentum ``m``; in
    update 2 the moves before the update chase a weight that has not moved yet,
    and update 1's momentum is 0). The exact average moved ``(1 - m^2) d``, so
    window 2's share ``s`` of it reads ``m^(1 + n) = 1 - s (1 - m^2)``.
    """
    if subject.average is None:
        return Outcome(unused=["the optimizer's moving average (use_ema)"],
                       note="moving average not used"), context
    if context.micro_part or not context.each_window_once or near(context.window_scale, 0):
        return Outcome(note="not judged: the windows probe's weights did not move once per "
                            "window"), context
    m = probe.ema_momentum
    averages = probes.contributions(probes.averaged(subject), probes.averaged(exact))
    shares = averages[: probes.WINDOWS * k].reshape(-1, k).mean(axis=1) / context.window_scale
    first, second, third = shares
    lag = 1 - second * (1 - m ** 2)
    moves = float(np.log(lag) / np.log(m) - 1) if lag > 0 else float("nan")
    said = ", ".join(f"{share:.2f}" for share in shares)
    measured = f"average of windows 1-3 {said}x exact: {moves:.2f} moves per update"
    if all(near(share, 1) for share in shares):
        return Outcome(measured), context
    if near(first, 1) and near(third, 1) and near(moves, k):
        return Outcome(measured, [_found(
            "ema_per_micro_step", moves,
            f"the moving average (use_ema) moves {moves:.2f} times per update: each update "
            f"keeps {m ** moves:.2f} of it, not {m:g}")]), context
    return Outcome(measured, unexplained=[
        f"ema probe: the moving average of windows 1-3 moved {said} times as far as the "
        "exact one"]), context


#: Each probe's judge and picture, by the probe's name: the one place a probe's
#: name decides how it is read.
READINGS = {
    "windows": Reading(_judge_windows, _window_labels, _micro_batches_shown),
    "ragged": Reading(_judge_ragged, _ragged_labels, _ragged_shown),
    "tail": Reading(_judge_tail, _tail_labels, _micro_batches_shown),
    "clipping": Reading(_judge_clipping, _numbered_labels, _micro_batches_shown),
    "ema": Reading(_judge_ema, _window_labels, _micro_batches_shown, probes.averaged),
}
