"""Is the trainer exact on *this* model? ``trainer.verify`` trains a few
windows with gaviz and the same rows with Keras's own ``Model.fit`` at the
big batch, from the same weights and optimizer state, and compares them.

What it runs: rows enough for two full windows and a partial one (so a
reset between windows, the tail, schedules, a moving average and
``iterations`` all take part), at a *scaled* micro-batch of
``ceil(b / k)`` rows by default, so that Keras's big batch of ``k`` of them
is about one micro-batch of the real run: it fits wherever the run fits.
Both runs train the user's own model and optimizer, one after the other,
and everything is put back afterwards (weights, optimizer state, metrics,
random states, the trainer's counters): the user's objects come out as they
went in, bit for bit, and no copy of the model is made.

What it compares: each variable, and each optimizer variable, by the one
rule for equal (:mod:`gaviz.training.verify.closeness`: its gap against how far
training moved it), and the loss and every compiled metric of the epoch.

Where the two differ, probes look for the cause rather than guess it:
random layers are turned off and both runs made again; the warnings gaviz
gave during its run (a sparse gradient summed into a dense window, a loss
added with ``add_loss`` that no window can reproduce) are
read; batch-statistics layers are named. What no probe explains is said to
be unexplained.
"""

from __future__ import annotations

import html
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import keras
import numpy as np
import tensorflow as tf
from keras import tree

from gaviz import _keras
from gaviz.training.data import feeds
from gaviz.training.fit import batch_layers, checks
from gaviz.training.loss.added_loss import InexactAddedLoss
from gaviz.training.loss.sparse_gradients import SparseGradientWarning
from gaviz.training.verify import closeness

#: Full windows a verification trains, before its partial one.
FULL_WINDOWS = 2
#: How far (relative) the epoch's loss and metrics may be from Model.fit's.
LOG_TOLERANCE = 1e-4
#: How far past Model.fit's own gap (the same rows in another order) a variable may be.
NOISE_MARGIN = 4


class Sample(NamedTuple):
    """The rows a verification trains on: inputs, targets, sample weights."""

    x: object
    y: object = None
    sample_weight: object = None


class Cause(NamedTuple):
    """Why the two runs differ, as a probe found it, and what to do."""

    name: str
    evidence: str
    advice: str


@dataclass
class Verification:
    """What :meth:`AccumulationTrainer.verify` found.

    Attributes:
        equal: every variable, optimizer variable, the loss and each metric
            within float rounding of ``Model.fit``'s.
        accumulation_steps: k.
        micro_batch_size: the micro-batch it verified at (Keras's batch: k times it).
        rows: rows trained; ``micro_batches``: the micro-batches they made.
        weights, optimizer: a ``VariableGap`` per variable, the worst first.
        logs: per entry of ``history.history``: (gaviz's, Model.fit's) value.
        causes: why they differ (empty when equal).
        rounding: the float type whose rounding the gaps were judged by.
        seconds: how long the verification took.
        noise: variables judged against Model.fit's own gap on the same rows in
            another order, past the rounding rule: their gradient is zero up to
            rounding, which an optimizer such as Adam turns into steps.
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

    @property
    def differing(self) -> list:
        """The variables (model's, then optimizer's) outside float rounding."""
        return [g for g in self.weights + self.optimizer if not g.equal]

    @property
    def gap(self) -> float:
        """The largest variable gap, as a fraction of how far training moved it."""
        gaps = [g.relative for g in self.weights]
        return max(gaps) if gaps else 0.0

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
            lines.append(f"  {name}: gaviz {ours:.6g}, Model.fit {theirs:.6g}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.equal else "#cf222e"
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
    """``fit(verify=True)`` found gaviz different from Model.fit on this model.

    Attributes:
        verification: the :class:`Verification`, with its causes.
    """

    def __init__(self, verification: Verification):
        self.verification = verification
        super().__init__(f"{verification}\nNothing was trained. Fit with verify=False to "
                         "train anyway.")


def required(found: Verification, verbose) -> None:
    """``fit(verify=True)``: raises :class:`NotExact` unless ``found`` is equal
    (and says so where ``verbose``)."""
    if not found.equal:
        raise NotExact(found)
    if verbose:
        print(found.verdict())


# ---------------------------------------------------------------- the rows

def verified_micro_batch_size(batch_size: int, accumulation_steps: int) -> int:
    """The scaled micro-batch: ``ceil(b / k)``, so Keras's batch is about ``b``."""
    return max(1, -(-batch_size // accumulation_steps))


def rows_needed(micro_batch_size: int, accumulation_steps: int) -> int:
    """Two full windows and a partial one, its last micro-batch short where it can be."""
    k, m = accumulation_steps, micro_batch_size
    micro_batches = FULL_WINDOWS * k + (max(1, k // 2) if k > 1 else 1)
    return m * (micro_batches - 1) + (m - m // 2)


def plan(x, y, sample_weight, batch_size, micro_batch_size, accumulation_steps):
    """``(micro_batch_size, sample)``: the micro-batch to verify at (by default
    the scaled one of the run's ``batch_size``, or the dataset's, or 32) and the
    rows to verify on."""
    k = accumulation_steps
    if micro_batch_size is None:
        run_batch = batch_size or feeds.batch_size_of(x) or 32
        micro_batch_size = verified_micro_batch_size(run_batch, k)
    m = checks.check_positive_int("micro_batch_size", micro_batch_size)
    return m, sample_of(x, y, sample_weight, rows_needed(m, k))


def sample_of(x, y, sample_weight, rows: int) -> Sample:
    """The first ``rows`` rows of ``fit``'s data, as tensors: arrays sliced, a
    ``tf.data.Dataset`` of batches unbatched and read once (so both runs see
    the same rows whatever it shuffles; rows of varying widths padded to the
    longest).

    Raises:
        TypeError: data of another kind (a generator, a PyDataset).
    """
    if isinstance(x, tf.data.Dataset):
        if y is not None or sample_weight is not None:
            raise ValueError("`y` and `sample_weight` must be None when `x` is a dataset "
                             "(its elements hold them), as in fit.")
        single = x.unbatch()
        # Rows of micro-batches padded each to its own width (padded_batch) are
        # padded again to one width: both runs then read the same arrays.
        varying = any(None in spec.shape.as_list() for spec in
                      tf.nest.flatten(single.element_spec) if spec.shape.rank)
        batched = single.padded_batch(rows) if varying else single.batch(rows)
        rows_read = next(iter(batched.take(1)), None)
        if rows_read is None:
            raise ValueError("`x` is an empty dataset: nothing to verify on.")
        parts = tuple(rows_read) if isinstance(rows_read, tuple) else (rows_read,)
        return Sample(*parts)
    if not _array_like(x):
        raise TypeError(
            "`x` must be arrays (numpy, tensors, dicts or lists of them) or a tf.data.Dataset "
            f"for verify. Received: x of type {type(x).__name__}. Pass a few batches of it as "
            "arrays.")

    def first(values):
        return None if values is None else tree.map_structure(lambda a: a[:rows], values)

    return Sample(first(x), first(y), first(sample_weight))


def _array_like(x) -> bool:
    leaves = tree.flatten(x)
    return bool(leaves) and all(hasattr(leaf, "shape") and hasattr(leaf, "__getitem__")
                                or isinstance(leaf, (list, tuple)) for leaf in leaves)


def count_rows(sample: Sample) -> int:
    return int(tree.flatten(sample.x)[0].shape[0])


def terms_of(sample: Sample, rows: int) -> int:
    """Loss terms in one gradient of the big batch: its rows times each row's targets."""
    targets = [t for t in tree.flatten(sample.y) if hasattr(t, "shape")]
    per_row = max([int(np.prod(t.shape[1:])) for t in targets] + [1])
    return max(1, rows * per_row)


# ------------------------------------------------------- putting it back

class Snapshot:
    """Values of variables and Python attributes, and the random states, to put back."""

    def __init__(self, variables, attributes: dict):
        seen, self.variables = set(), []
        for variable in variables:
            if id(variable) not in seen:
                seen.add(id(variable))
                self.variables.append(variable)
        self.values = [np.array(v.numpy()) for v in self.variables]
        self.attributes = {(id(owner), name): (owner, name, getattr(owner, name, _MISSING))
                           for owner, names in attributes.items() for name in names}
        self.random = (random.getstate(), np.random.get_state())

    def restore_values(self) -> None:
        """The variables and random states (not the attributes: graph functions
        made anew between runs stay)."""
        for variable, value in zip(self.variables, self.values):
            variable.assign(value)
        random.setstate(self.random[0])
        np.random.set_state(self.random[1])

    def restore(self) -> None:
        self.restore_values()
        for owner, name, value in self.attributes.values():
            if value is _MISSING:
                if hasattr(owner, name):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)


_MISSING = object()


# ------------------------------------------------------------- comparing

class Trained(NamedTuple):
    """One run's end: the model's and the optimizer's values, its logs, what it warned."""

    weights: list
    optimizer: list
    logs: dict
    said: list


def train_from(start: Snapshot, model, optimizer, run: Callable) -> Trained:
    """Runs ``run`` from ``start``'s values; returns where it ended."""
    start.restore_values()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        logs = run()
    return Trained([v.numpy() for v in model.variables],
                   [v.numpy() for v in optimizer.variables], logs, said)


def compare(model, optimizer, start: Snapshot, ours: Trained, theirs: Trained, terms: int,
            rounding: str):
    """Two runs from ``start`` compared: each variable's and optimizer variable's
    gap (random seed states aside), and each log entry of both."""
    begun = {id(v): value for v, value in zip(start.variables, start.values)}

    def gaps(variables, got, expected):
        kept = [i for i, v in enumerate(variables) if not batch_layers.seed_state(v)]
        return closeness.variable_gaps(
            [got[i] for i in kept], [expected[i] for i in kept],
            [begun[id(variables[i])] for i in kept], terms,
            [variables[i].path for i in kept], rounding=rounding)

    logs = {name: (float(ours.logs[name][-1]), float(theirs.logs[name][-1]))
            for name in theirs.logs if name in ours.logs}
    return (gaps(model.variables, ours.weights, theirs.weights),
            gaps(optimizer.variables, ours.optimizer, theirs.optimizer), logs)


def _ours(caught) -> bool:
    return issubclass(caught.category, (SparseGradientWarning, InexactAddedLoss))


def logs_equal(logs: dict) -> bool:
    return all(math.isclose(ours, theirs, rel_tol=LOG_TOLERANCE, abs_tol=1e-6)
               for ours, theirs in logs.values())


def _random_layer_kinds():
    """Keras's layers that draw at random in training, with what turns each off."""
    kinds = [(getattr(keras.layers, name), "rate") for name in (
        "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D",
        "GaussianDropout", "AlphaDropout") if hasattr(keras.layers, name)]
    return kinds + [(keras.layers.GaussianNoise, "stddev")]


def random_layers(model) -> list:
    """``(layer, attribute)`` for each layer of ``model`` drawing at random in training."""
    return [(layer, attribute) for layer in _keras.flatten_layers(model)
            for kind, attribute in _random_layer_kinds()
            if isinstance(layer, kind) and getattr(layer, attribute, 0)]


# ------------------------------------------------------------- verifying

class Runs(NamedTuple):
    """What a verification runs, each from the state the last one left.

    ``prepare(sample)`` builds what a fit on ``sample`` builds (before the
    snapshot); ``gaviz(sample)`` and ``keras(sample)`` train one epoch on it and
    return ``history.history``; ``refresh()`` makes their graph functions anew
    (after a layer's setting changed), or is None where they are not ours.
    """

    prepare: Callable
    gaviz: Callable
    keras: Callable
    refresh: Callable


def verify(model, optimizer, accumulation_steps: int, micro_batch_size: int, sample: Sample,
           runs: Runs, variables, attributes: dict) -> Verification:
    """Trains ``sample`` with gaviz and with Model.fit from one state, compares,
    looks for the cause of any difference, and puts back ``variables``,
    ``attributes`` and the random states. See the module's docstring."""
    began = time.perf_counter()
    with warnings.catch_warnings(record=True) as told:  # the trainer's checks of the model
        warnings.simplefilter("always")
        runs.prepare(sample)
    for caught in told:  # said as fit says them, and kept for the causes
        warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    start = Snapshot([*variables, *model.variables, *optimizer.variables,
                      *model.metrics_variables], attributes)
    k, m = accumulation_steps, micro_batch_size
    rows = count_rows(sample)
    rounding = rounding_of(model)
    terms = terms_of(sample, min(rows, k * m))
    noise = []

    def trained(run, rows):
        return train_from(start, model, optimizer, lambda: run(rows))

    def judged(ours, theirs):
        return compare(model, optimizer, start, ours, theirs, terms, rounding)

    def both():
        return trained(runs.gaviz, sample), trained(runs.keras, sample)

    try:
        ours, theirs = both()
        weights, optimizer_gaps, logs = judged(ours, theirs)
        if not _equal(weights + optimizer_gaps) and logs_equal(logs) \
                and not random_layers(model):  # Model.fit's own gap: its run, reordered
            weights, optimizer_gaps, noise = against_noise(
                weights, optimizer_gaps,
                judged(trained(runs.keras, reordered(sample, k * m)), theirs))
        equal = _equal(weights + optimizer_gaps) and logs_equal(logs)
        causes = [] if equal else causes_of(model, k, told + ours.said,
                                            lambda: judged(*both()), runs)
    finally:
        start.restore()
    return Verification(equal, k, m, rows, -(-rows // m), weights, optimizer_gaps, logs, causes,
                        rounding, time.perf_counter() - began, noise)


def _equal(gaps) -> bool:
    return all(g.equal for g in gaps)


def reordered(sample: Sample, block: int) -> Sample:
    """The same rows with each block of ``block`` (one of Model.fit's batches)
    reversed: the same sums, added in another order."""
    rows = count_rows(sample)
    order = np.concatenate([np.arange(start, min(start + block, rows))[::-1]
                            for start in range(0, rows, block)])

    def take(values):
        return None if values is None else tree.map_structure(
            lambda a: tf.gather(tf.convert_to_tensor(a), order), values)

    return Sample(take(sample.x), take(sample.y), take(sample.sample_weight))


def against_noise(weights, optimizer_gaps, own_gaps):
    """The variables judged again against Model.fit's own gap on the same rows
    in another order (:func:`reordered`): where a variable's gradient is zero up
    to rounding (an attention key's bias), an optimizer that divides by the
    gradient's scale (Adam) turns that rounding into full steps, in Keras's own
    runs too. ``own_gaps``: Model.fit's reordered run against its own, as
    :func:`compare` gives them. Returns both lists re-judged and the names judged so."""
    own_weights, own_optimizer, _ = own_gaps
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


def rounding_of(model) -> str:
    """The float type a model computes in (mixed precision: float16 or bfloat16)."""
    compute = getattr(getattr(model, "dtype_policy", None), "compute_dtype", "float32")
    return compute if compute in ("float16", "bfloat16") else "float32"


def causes_of(model, k: int, said: list, again: Callable, runs: Runs) -> list:
    """Why gaviz and Model.fit differ: what gaviz said during its run, the
    model's batch-statistics layers, and a run with random layers off."""
    causes = [Cause(_kind(w.category), str(w.message).split(". ")[0] + ".", _ADVICE[w.category])
              for w in _unique([w for w in said if _ours(w)])]
    names = batch_layers.batch_dependent_layers(model)
    if names and k > 1:
        causes.append(Cause(
            "batch statistics",
            f"{', '.join(names)} normalize each micro-batch with its own mean and variance, "
            "not the big batch's.",
            "LayerNormalization or GroupNormalization accumulate exactly; a larger "
            "micro-batch narrows the gap; gaviz.batch_dependence measures it."))
    layers = random_layers(model)
    if layers and runs.refresh is None:  # another's graph functions: not traced anew here
        causes.append(Cause(
            "random layers", f"{', '.join(sorted({layer.name for layer, _ in layers}))} draw "
            "at random in training: micro-batches draw other masks than the big batch.",
            "Verify again with their rate at 0, set before your loop's functions are traced, "
            "to see whether they are the whole cause."))
    elif layers:
        causes.append(_without_randomness(layers, again, runs))
    if not causes:
        causes.append(Cause(
            "unexplained", "no probe explains the difference (no random or batch-statistics "
            "layer, no warning from gaviz).",
            "This is a bug of gaviz's or a case it does not know: please report it with this "
            "output. Until then, train this model with Model.fit, or with k=1."))
    return causes


def _without_randomness(layers, again: Callable, runs: Runs) -> Cause:
    """Both runs again with every random layer off: equal then, they explain it."""
    names = ", ".join(sorted({layer.name for layer, _ in layers}))
    saved = [(layer, attribute, getattr(layer, attribute)) for layer, attribute in layers]
    try:
        for layer, attribute, _ in saved:
            setattr(layer, attribute, 0)
        runs.refresh()
        weights, optimizer_gaps, logs = again()
    finally:
        for layer, attribute, value in saved:
            setattr(layer, attribute, value)
    if all(g.equal for g in weights + optimizer_gaps) and logs_equal(logs):
        return Cause("random layers",
                     f"with {names} off the two runs are equal (largest gap "
                     f"{max([g.relative for g in weights] + [0.0]):.2g} of the movement).",
                     "They draw other masks for each micro-batch than for the big batch: the "
                     "update equals Model.fit's only statistically. Nothing to fix.")
    return Cause("random layers", f"{names} draw at random; with them off the runs still "
                 "differ, so they are not the whole cause.",
                 "Look at the variables named below, and at the other causes.")


def _unique(said: list) -> list:
    seen, unique = set(), []
    for caught in said:
        if caught.category not in seen:
            seen.add(caught.category)
            unique.append(caught)
    return unique


def _kind(category) -> str:
    return {SparseGradientWarning: "sparse gradients",
            InexactAddedLoss: "a loss added with add_loss"}[category]


_ADVICE = {
    SparseGradientWarning: (
        "A variable's sparse gradient (an Embedding's rows) was summed into a dense window, "
        "where Model.fit hands its optimizer each occurrence of a row: under an optimizer "
        "that is not linear in the gradient they differ. Its gradient changed kind after the "
        "window was made; the guide's 'Sparse gradients' says more."),
    InexactAddedLoss: (
        "The added loss is a statistic of the whole batch, which no window of micro-batches "
        "reproduces: train with k=1, or add it as a mean over rows."),
}


# ------------------------------------------------------------ an own loop

def verify_loop(train_epoch: Callable, model, x, y=None, accumulation_steps: int = 1,
                batch_size: int | None = None, sample_weight=None,
                micro_batch_size: int | None = None, optimizer=None) -> Verification:
    """Is your own accumulation loop exact? Runs it for two windows and a partial
    one, and the same loop at ``accumulation_steps=1`` on the big batch (plain
    training), from the same weights and optimizer state, and compares them as
    ``trainer.verify`` does; then puts the model and optimizer back.

    The contract: ``train_epoch(micro_batches, accumulation_steps)`` trains
    ``model`` (with ``optimizer``) for one pass over ``micro_batches``, a
    ``tf.data.Dataset`` of ``(x, y)`` or ``(x, y, sample_weight)``, updating once
    per window of ``accumulation_steps`` of them and applying the partial window
    at the end (a :class:`gaviz.Accumulator` made for that ``accumulation_steps``,
    ``step`` per micro-batch, ``flush`` at the end). With
    ``accumulation_steps=1`` it must be a plain training step per batch: that
    is the reference. It may return nothing.

    Args:
        train_epoch: as above.
        model: the ``keras.Model`` it trains (built, or built on the first rows).
        x, y, sample_weight: arrays or a ``tf.data.Dataset`` of batches, as ``verify``.
        accumulation_steps: k of the loop to verify.
        batch_size, micro_batch_size: as ``AccumulationTrainer.verify``.
        optimizer: the optimizer it steps (default: ``model.optimizer``).

    Returns:
        A :class:`Verification` (its ``logs`` are empty: the loop reports none).
    """
    k = checks.check_positive_int("accumulation_steps", accumulation_steps)
    optimizer = optimizer if optimizer is not None else model.optimizer
    if optimizer is None:
        raise ValueError("`optimizer` must be given, or `model` compiled with one.")
    m, sample = plan(x, y, sample_weight, batch_size, micro_batch_size, k)

    def batches(size):
        return tf.data.Dataset.from_tensor_slices(
            tuple(part for part in sample if part is not None)).batch(size)

    def prepare(rows):  # what a first step builds: the model, the optimizer's slots
        if not model.built:
            model(tree.map_structure(lambda a: a[:1], rows.x))
        if not optimizer.built:
            optimizer.build(model.trainable_variables)

    runs = Runs(prepare, lambda rows: train_epoch(batches(m), k) or {},
                lambda rows: train_epoch(batches(k * m), 1) or {}, None)
    return verify(model, optimizer, k, m, sample, runs, [], {})
