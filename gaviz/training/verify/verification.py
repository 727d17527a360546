"""Is the trainer exact on *this* model? ``trainer.verify`` trains a few
windows with gaviz and the same rows with Keras's own ``Model.fit`` at the
big batch, from the same weights and optimizer state, and compares them.

The parts, one idea each:

- :mod:`~gaviz.training.verify.rows`: which rows, at which micro-batch (two
  full windows and a partial one, at ``ceil(b / k)`` rows), read from a
  dataset without touching its shuffling;
- :mod:`~gaviz.training.verify.runs`: what runs (a fit of the trainer and
  ``Model.fit``; or the user's loop at k and at 1);
- :mod:`~gaviz.training.verify.snapshot`: everything put back afterwards
  (weights, optimizer state, metrics, random states, the trainer's
  counters): the user's objects come out as they went in, bit for bit, and
  no copy of the model is made;
- :mod:`~gaviz.training.verify.comparing`: each variable by the one rule for
  equal (:mod:`~gaviz.training.verify.closeness`), the loss and every
  compiled metric of the epoch (a model's per-output losses, averaged
  otherwise by design, shown and not judged);
- :mod:`~gaviz.training.verify.probes`: where the two differ, the cause, found
  by probes rather than guessed; random layers alone give a verdict of their
  own, "equal up to random draws";
- :mod:`~gaviz.training.verify.report`: the :class:`Verification`, said.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from typing import Callable

from gaviz.training.fit import checks
from gaviz.training.verify import probes
from gaviz.training.verify.comparing import Judge, compare, rounding_of, train_from
from gaviz.training.verify.report import EQUAL, Cause, NotExact, Verification, required
from gaviz.training.verify.rows import Sample, count_rows, plan, reordered, terms_of
from gaviz.training.verify.runs import Runs, loop_runs
from gaviz.training.verify.snapshot import RandomStates, Snapshot

__all__ = ["Cause", "NotExact", "Runs", "Sample", "Verification", "plan", "required", "verify",
           "verify_loop"]


def verify(model, optimizer, accumulation_steps: int, micro_batch_size: int, sample: Sample,
           runs: Runs, variables, attributes: dict) -> Verification:
    """Trains ``sample`` with gaviz and with Model.fit from one state, compares,
    looks for the cause of any difference, and puts back ``variables``,
    ``attributes`` and the random states. See the module's docstring."""
    began = time.perf_counter()
    randomness = RandomStates()  # before anything draws, or traces a draw
    with warnings.catch_warnings(record=True) as told:  # the trainer's checks of the model
        warnings.simplefilter("always")
        runs.prepare(sample)
    for caught in told:  # said as fit says them, and kept for the causes
        warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    start = Snapshot([*variables, *model.variables, *optimizer.variables,
                      *model.metrics_variables], attributes, randomness)
    k, m = accumulation_steps, micro_batch_size
    rows = count_rows(sample)
    unjudged = runs.unjudged()

    def trained(run, rows):
        return train_from(start, model, optimizer, lambda: run(rows))

    def own_gap(theirs, rows):  # Model.fit's own run on the same rows in another order
        return compare(model, optimizer, start, trained(runs.keras, reordered(rows, k * m)),
                       theirs, terms, rounding)

    terms, rounding = terms_of(sample, min(rows, k * m)), rounding_of(model)
    judge = Judge(model, optimizer, start, terms, rounding, unjudged, own_gap,
                  lambda: bool(probes.random_layers(model)))
    try:
        with _retracing_unsaid():
            ours = trained(runs.gaviz, sample)
            judged = judge(ours, trained(runs.keras, sample), sample)
            kind, causes = EQUAL, []
            if not judged.equal(unjudged):
                kind, causes = probes.find(probes.Probing(
                    model, k, m, sample, runs, start, told + ours.said, ours, judged,
                    unjudged, trained, judge))
    finally:
        start.restore()
        runs.after()
    return Verification(kind == EQUAL, k, m, rows, -(-rows // m), judged.weights,
                        judged.optimizer, judged.logs, causes, rounding,
                        time.perf_counter() - began, judged.noise, kind, unjudged)


class _Retracing(logging.Filter):
    def filter(self, record) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def _retracing_unsaid():
    """TensorFlow's warning that a function traced again and again, left unsaid:
    verify's runs trace anew on purpose (another micro-batch, probes with a
    layer turned off, other rows), and that warning counts calls of a method
    across every object (each trainer's window loop, each Keras fit)."""
    retracing, logger = _Retracing(), logging.getLogger("tensorflow")
    logger.addFilter(retracing)
    try:
        yield
    finally:
        logger.removeFilter(retracing)


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
    return verify(model, optimizer, k, m, sample, loop_runs(train_epoch, model, optimizer, k, m),
                  [], {})
