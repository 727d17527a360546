"""What a verification runs: gaviz's windows and ``Model.fit`` at the big batch,
on the same rows, each from the state the last one left, and what those runs
change (put back afterwards). ``trainer.verify``'s runs are a fit of the
trainer and the model's own fit; ``verify_loop``'s, the user's loop at k and
at 1."""

from __future__ import annotations

from typing import Callable, NamedTuple

import tensorflow as tf
from keras import tree

from gaviz.training.data import feeds
from gaviz.training.loss import row_means
from gaviz.training.loss.objective import NotPerRow
from gaviz.training.loss.row_losses import CoupledLoss


class Runs(NamedTuple):
    """What a verification runs, and what it knows of the trainer's choices.

    ``prepare(sample)`` builds what a fit on ``sample`` builds (before the
    snapshot); ``gaviz(sample)`` and ``keras(sample)`` train one epoch on it and
    return ``history.history``; ``refresh()`` makes their graph functions anew
    (after a layer's setting changed), or is None where they are not ours.
    ``tail``: what the windows do with a partial one (``"flush"``: Model.fit's);
    ``unjudged()``: the log entries not documented equal, each with why;
    ``after()``: run last, once everything is put back. ``summed_coupling()``:
    the ``CoupledLoss`` (or ``NotPerRow``) the exact
    trainer would have found, where the trainer's rule sums such a loss
    micro-batch by micro-batch instead of caching its window; or None.
    """

    prepare: Callable
    gaviz: Callable
    keras: Callable
    refresh: Callable | None
    tail: str = "flush"
    unjudged: Callable[[], dict] = dict
    summed_coupling: Callable[[], object] = lambda: None
    after: Callable[[], None] = lambda: None


#: Why a model's per-output losses are not judged.
PER_OUTPUT = ("averaged over micro-batches by their rows, where Model.fit averages its batches; "
              "gaviz said so when it built the loss")


def verification_runs(trainer, k: int, m: int, class_weight):
    """What ``verify`` runs on ``trainer`` at micro-batches of ``m``, and the
    attributes the runs change (put back afterwards)."""
    model = trainer.model
    fed = {}

    def prepare(rows):
        trainer._follow_compile()
        trainer._checked_spec = None  # the model's losses checked again, their warnings heard
        data = feeds.FitData(rows.x, rows.y, m, False, rows.sample_weight, class_weight, 0.0,
                             None, None)
        fed["feed"] = feeds.make_feed(data, model, trainer.strategy,
                                      targets=trainer._needs_targets)
        trainer._prepare(fed["feed"])

    def gaviz_run(rows):
        return trainer.fit(rows.x, rows.y, m, epochs=1, verbose=0, shuffle=False,
                           sample_weight=rows.sample_weight, class_weight=class_weight).history

    def keras_run(rows):
        return model.fit(rows.x, rows.y, k * m, epochs=1, verbose=0, shuffle=False,
                         sample_weight=rows.sample_weight, class_weight=class_weight).history

    def refresh():  # after a layer's setting changed: both traced anew
        trainer.window_loop = trainer._window_loop()
        model.train_function = None

    def unjudged():
        terms = trainer.objective.terms if trainer.own_loss is None else []
        return {f"{term.name}_loss": PER_OUTPUT for term in terms} if len(terms) > 1 else {}

    def summed_coupling():
        """The coupling check the exact trainer runs, where the rule skips it."""
        objective = trainer.objective
        if trainer.rule.caches_coupled_loss or trainer.own_loss is not None \
                or not objective.unknown_terms() or k == 1:
            return None
        try:
            objective.check_rows(row_means.probe_batch(fed["feed"].probe(row_means.PROBE_ROWS),
                                                       model))
        except (CoupledLoss, NotPerRow) as coupled:
            return coupled
        return None

    before = (trainer._checked_spec, trainer.micro_steps_in_flight, trainer.optimizer,
              trainer.objective)

    def after():
        """The data the trainer checked, and whether two micro-steps overlap, as
        they were: the run's first fit then prepares as it would have (reading
        its own first micro-batch, which advances a reshuffling dataset, and
        choosing the overlap for its rows, not the verification's smaller
        ones). After a compile verify followed, everything is checked again."""
        checked, in_flight, optimizer, objective = before
        followed = trainer.optimizer is not optimizer or trainer.objective is not objective
        trainer._checked_spec = None if followed else checked
        trainer.micro_steps_in_flight = in_flight

    # What a fit changes on the trainer and the model beyond variables, put
    # back so that the fit after verification is the fit without it.
    attributes = {model: ("train_function", "history", "stop_training"),
                  trainer: ("_checked_spec", "_state_watched", "window_loop"),
                  trainer.call_size: ("size", "listening")}
    runs = Runs(prepare, gaviz_run, keras_run, refresh, trainer.tail, unjudged, summed_coupling,
                after)
    return runs, attributes


def loop_runs(train_epoch: Callable, model, optimizer, k: int, m: int) -> Runs:
    """``verify_loop``'s runs: ``train_epoch`` at ``k`` on micro-batches of
    ``m``, and at 1 on batches of ``k * m`` (plain training, the reference)."""

    def batches(rows, size):
        return tf.data.Dataset.from_tensor_slices(
            tuple(part for part in rows if part is not None)).batch(size)

    def prepare(rows):  # what a first step builds: the model, the optimizer's slots
        if not model.built:
            model(tree.map_structure(lambda a: a[:1], rows.x))
        if not optimizer.built:
            optimizer.build(model.trainable_variables)

    return Runs(prepare, lambda rows: train_epoch(batches(rows, m), k) or {},
                lambda rows: train_epoch(batches(rows, k * m), 1) or {}, None)
