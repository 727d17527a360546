"""Why gaviz and Model.fit differ on a model, found by probes rather than guessed.

Each cause gaviz knows has a probe, and each names its cause with its
evidence:

- random layers: both runs made again with them off; equal then, the verdict
  is "equal up to random draws" (the updates differ as two big-batch runs
  with different seeds do). Random draws no probe can turn off (a layer's
  own seed generator, Keras's or TensorFlow's global one) are named by the
  generators that moved;
- the tail: a trainer made with ``tail="drop"`` or ``"carry"`` (the user's
  choice) does not apply the partial window at the epoch's end, where
  Model.fit trains it as a short batch; against Model.fit on the rows of
  full windows alone the runs are equal, or the tail is not the whole cause;
- what gaviz said during its run: a sparse gradient summed into a dense
  window, a loss added with add_loss that no window reproduces;
- a loss whose rows couple, summed micro-batch by micro-batch by a rule
  that skips the cached window (a pitfall's);
- batch statistics (BatchNormalization);
- layers that update their own non-trainable variables in training (a
  counter, SpectralNormalization's power iteration), named by the variables
  that moved, as the trainer's first fit names them.

"Unexplained" is said only after every probe has run and none explains the
difference, with what was tried.
"""

from __future__ import annotations

import contextlib
from typing import Callable, NamedTuple

import keras

from gaviz import _keras
from gaviz.training.fit import batch_layers
from gaviz.training.loss.added_loss import InexactAddedLoss
from gaviz.training.loss.sparse_gradients import SparseGradientWarning
from gaviz.training.verify.comparing import Judged, Trained
from gaviz.training.verify.report import DIFFERENT, RANDOM_DRAWS, Cause
from gaviz.training.verify.rows import Sample, count_rows, first_rows, full_window_rows
from gaviz.training.verify.runs import Runs
from gaviz.training.verify.snapshot import Snapshot


class Probing(NamedTuple):
    """What the probes are given: the model, the runs, their first results,
    and how to train and judge again from the same start."""

    model: object
    accumulation_steps: int
    micro_batch_size: int
    sample: Sample
    runs: Runs
    start: Snapshot
    said: list  # the warnings gaviz gave, building the fit and during its run
    ours: Trained
    judged: Judged
    unjudged: dict
    train: Callable  # (run, rows) -> Trained, from the start
    judge: Callable  # (ours, theirs, theirs' rows, logs=None) -> Judged


def find(probing: Probing) -> tuple[str, list]:
    """``(kind, causes)`` for two runs that differ: ``"equal up to random
    draws"`` where the random layers are the whole difference, else
    ``"different"`` and every cause the probes found."""
    p = probing
    layers = random_layers(p.model)
    off = tail_off = None
    if layers and p.runs.refresh is not None:
        off, tail_off = _without_randomness(p, layers)
        if off.equal(p.unjudged):
            return RANDOM_DRAWS, [_random_explained(layers, off)]
    tried, named = [], []  # named: causes whose share of the difference no probe measures
    for probe in (_said, _summed_coupling, _batch_statistics, _own_variables, _random_draws):
        named += probe(p, tried, layers)
    # The probes that made the runs again say whether their cause is the whole
    # difference; where each cause found was shown not to be, another is.
    measured = _random_layers(p, layers, off) + _tail(p, tail_off, tried)
    causes = named + measured
    if not named and not any(cause.explains for cause in measured):
        causes.append(_unexplained(tried, bool(measured)))
    return DIFFERENT, causes


# ------------------------------------------------------------- randomness

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


def _names(layers) -> str:
    return ", ".join(sorted({layer.name for layer, _ in layers}))


@contextlib.contextmanager
def random_layers_off(layers, refresh: Callable):
    """Every layer of ``layers`` at rate (or stddev) 0, and the runs' graph
    functions traced anew; put back afterwards."""
    saved = [(layer, attribute, getattr(layer, attribute)) for layer, attribute in layers]
    try:
        for layer, attribute, _ in saved:
            setattr(layer, attribute, 0)
        refresh()
        yield
    finally:
        for layer, attribute, value in saved:
            setattr(layer, attribute, value)


def _without_randomness(p: Probing, layers) -> tuple[Judged, Judged | None]:
    """Both runs again with the random layers off, and where the tail is not
    Model.fit's, Model.fit again on the rows of full windows."""
    with random_layers_off(layers, p.runs.refresh):
        ours = p.train(p.runs.gaviz, p.sample)
        off = p.judge(ours, p.train(p.runs.keras, p.sample), p.sample)
        tail_off = None
        if p.runs.tail != "flush":
            tail_off = _judged_on_kept(p, ours)
    return off, tail_off


def _random_explained(layers, off: Judged) -> Cause:
    return Cause(
        "random layers",
        f"with {_names(layers)} off the two runs are equal (largest gap {off.gap:.2g} of "
        "the movement).",
        "They draw other masks for each micro-batch than for the big batch: the update "
        "equals Model.fit's only statistically, as two big-batch runs with different seeds "
        "do. Nothing to fix.", explains=True)


def _random_layers(p: Probing, layers, off) -> list:
    """Random layers turned off with the runs still differing: not the whole cause."""
    if not layers or off is None:
        return []
    return [Cause(
        "random layers", f"{_names(layers)} draw at random; with them off the runs still "
        f"differ (largest gap {off.gap:.2g} of the movement), so they are not the whole cause.",
        "Look at the variables named below, and at the other causes.")]


def _random_draws(p: Probing, tried, layers) -> list:
    """Draws no probe turns off: random layers of a loop verify does not trace
    (``verify_loop``), layers with seed generators of their own, and the global
    generators (Keras's, TensorFlow's)."""
    causes = []
    if layers and p.runs.refresh is None:  # another's graph functions: not traced anew here
        causes.append(Cause(
            "random layers", f"{_names(layers)} draw at random in training: micro-batches "
            "draw other masks than the big batch.",
            "Verify again with their rate at 0, set before your loop's functions are traced, "
            "to see whether they are the whole cause."))
    drew = _seeded_layers(p, layers) + list(p.ours.drew)
    if drew:
        causes.append(Cause(
            "random draws", f"gaviz's run drew from {', '.join(drew)}, which no probe can "
            "turn off: micro-batches draw other numbers than the big batch.",
            "If the draws are the whole cause, the update equals Model.fit's statistically. "
            "Verify with the layers that draw left out (or their strength at 0) to see."))
    tried.append("random layers (" + (_names(layers) + " turned off" if layers else "none")
                 + "; other draws: " + (", ".join(drew) if drew else "none") + ")")
    return causes


def _seeded_layers(p: Probing, layers) -> list:
    """The layers, other than ``layers``, whose own seed generators moved in
    gaviz's run (by name: a generator's path does not say its layer)."""
    known = {id(v) for layer, _ in layers for v in layer.variables}
    owner = {}
    for layer in _keras.flatten_layers(p.model):  # each layer before its own: the last wins
        owner.update({id(v): layer.name for v in layer.variables if batch_layers.seed_state(v)})
    moved = [owner.get(id(v), v.path) for v, value in zip(p.model.variables, p.ours.weights)
             if batch_layers.seed_state(v) and id(v) not in known
             and not (value == p.start.start_value(v)).all()]
    return [f"{name} (its SeedGenerator)" for name in dict.fromkeys(moved)]


# ------------------------------------------------------------------ tail

def _kept(p: Probing) -> Sample:
    return first_rows(p.sample, full_window_rows(p.sample, p.accumulation_steps,
                                                 p.micro_batch_size))


def _judged_on_kept(p: Probing, ours: Trained) -> Judged:
    """``ours`` against Model.fit on the rows of full windows alone."""
    kept = _kept(p)
    return p.judge(ours, p.train(p.runs.keras, kept), kept, logs=_TAIL_LOGS)


#: What a tail's probe judges beside the variables: the loss the windows
#: applied (a metric counts every micro-batch, the partial window's too).
_TAIL_LOGS = ("loss",)


def _tail(p: Probing, tail_off, tried) -> list:
    """A tail that is not Model.fit's: the partial window's rows left out of
    Model.fit's run, the weights, optimizer state and loss judged again."""
    policy = p.runs.tail
    tried.append(f"the tail (tail={policy!r})")
    if policy == "flush":
        return []
    kept = _kept(p)
    if tail_off is None:
        tail_off = _judged_on_kept(p, p.ours)
    equal = tail_off.equal(p.unjudged, logs=_TAIL_LOGS)
    dropped = count_rows(p.sample) - count_rows(kept)
    does = "dropped" if policy == "drop" else "carried into the next epoch"
    found = (f"against Model.fit on the {count_rows(kept)} rows of full windows alone, the "
             f"weights, optimizer state and loss are equal (largest gap {tail_off.gap:.2g} of "
             "the movement)" if equal else "against Model.fit on the rows of full windows "
             "alone they still differ, so it is not the whole cause")
    return [Cause(
        "the tail",
        f'tail="{policy}": the epoch\'s last window ({dropped} rows) is {does}, where '
        f"Model.fit trains those rows as a short batch; {found}.",
        'Your choice, documented to differ from Model.fit at the partial window: '
        'tail="flush" (the default) is Model.fit\'s. Keep it where you want updates of full '
        "windows only (as Model.fit on batches with drop_remainder=True).", explains=equal)]


# ------------------------------------------------------- what gaviz knows

def _said(p: Probing, tried, layers=()) -> list:
    """What gaviz said while it built the fit and trained."""
    said = []
    for caught in p.said:
        if issubclass(caught.category, tuple(_ADVICE)) and \
                caught.category not in [c.category for c in said]:
            said.append(caught)
    tried.append("gaviz's warnings (" + (", ".join(_KIND[w.category] for w in said)
                                          or "none") + ")")
    return [Cause(_KIND[w.category], str(w.message).split(". ")[0] + ".", _ADVICE[w.category])
            for w in said]


_KIND = {SparseGradientWarning: "sparse gradients",
         InexactAddedLoss: "a loss added with add_loss"}

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


def _summed_coupling(p: Probing, tried, layers=()) -> list:
    coupled = p.runs.summed_coupling()
    tried.append("a loss coupling rows, summed by micro-batch (" +
                 ("found" if coupled else "none") + ")")
    if coupled is None:
        return []
    return [Cause(
        "a coupled loss summed by micro-batch",
        f"{_coupling(coupled)}, and this trainer's rule sums it micro-batch by "
        "micro-batch: each row meets only its own micro-batch's rows.",
        "The gallery's coupled_loss_summed: the exact trainer (gaviz.AccumulationTrainer) "
        "trains such a loss with the cached window, the loss once on the window's outputs "
        "as Model.fit's big batch.")]


def _coupling(error) -> str:
    """What the loss does, from the error the exact trainer's check raised."""
    loss = getattr(error, "loss", None)
    return (f"`loss` '{loss}' couples the batch's rows" if loss is not None
            else f"`loss` {error.what}")


def _batch_statistics(p: Probing, tried, layers=()) -> list:
    names = batch_layers.batch_dependent_layers(p.model) if p.accumulation_steps > 1 else []
    tried.append("batch statistics (" + (", ".join(names) or "no such layer") + ")")
    if not names:
        return []
    return [Cause(
        "batch statistics",
        f"{', '.join(names)} normalize each micro-batch with its own mean and variance, "
        "not the big batch's.",
        "LayerNormalization or GroupNormalization accumulate exactly; a larger "
        "micro-batch narrows the gap; gaviz.batch_dependence measures it.")]


def _own_variables(p: Probing, tried, layers=()) -> list:
    """Layers that update their own non-trainable variables in training: the
    variables the trainer's first fit watches, moved by gaviz's run to other
    values than Model.fit's."""
    watched = {id(v) for v in batch_layers.watched_variables(p.model)}
    differing = {g.name for g in p.judged.weights + p.judged.optimizer if not g.equal}
    moved = [v.path for v, value in zip(p.model.variables, p.ours.weights)
             if id(v) in watched and v.path in differing
             and not (value == p.start.start_value(v)).all()]
    tried.append("layers updating their own variables (" + (", ".join(moved) or "none moved")
                 + ")")
    if not moved or p.accumulation_steps == 1:
        return []
    alone = differing <= set(moved)
    return [Cause(
        "layers that update their own variables",
        f"{', '.join(moved)} changed in training: once per micro-batch here "
        f"({p.accumulation_steps} per update), once per batch under Model.fit"
        + ("; no other variable differs." if alone else ", and the weights they feed differ "
           "too."),
        "Update such state from a callback once per update, or freeze it (trainable=False) "
        "while accumulating; the caveats page says more.",
        explains=alone and _logs_equal(p)),
    ]


def _logs_equal(p: Probing) -> bool:
    return Judged([], [], p.judged.logs).equal(p.unjudged)


def _unexplained(tried, beyond_measured: bool) -> Cause:
    beyond = ("beyond the causes above, each shown not to be the whole difference"
              if beyond_measured else "no probe explains the difference")
    return Cause(
        "unexplained", f"{beyond}. Tried: {'; '.join(tried)}.",
        "This is a bug of gaviz's or a case it does not know: please report it with this "
        "output. Until then, train this model with Model.fit, or with k=1.")
