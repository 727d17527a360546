"""Lesson 12's exercise (appendix, the live dashboard): an ``on_update`` callback that stops early.

In the notebook::

    from gaviz.course import lesson12
    lesson12.early_stop.check(make_early_stop)

The checker first feeds the learner's callback four made-up updates (losses
2.0, 0.9, 0.5, 0.49 against a threshold of 0.5) with a real trainer that is
not fitting (so ``trainer.model`` and the rest are there, as the lesson shows
them), and names the usual faults precisely (``<=`` for ``<``, no ``records``,
the wrong pairs, a flag set on some other trainer); then it runs a real
``AccumulationTrainer.fit`` with the callback and compares it with an
uninterrupted run of the same trainer.
"""

from __future__ import annotations

import keras

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.training.fit.history import Update
from gaviz.training.trainer import AccumulationTrainer

_THRESHOLD = 0.5
_LOSSES = (2.0, 0.9, 0.5, 0.49)  # stops after the fourth: 0.5 is not below 0.5
_AFTER = 0.9  # an update after the stop, as a call of several windows reports one
_EPOCHS = 8


def _update(number: int, loss: float) -> Update:
    return Update(update=number, epoch=1, loss=loss, samples=8, micro_steps=2,
                  samples_seen=8 * number, seconds=0.0)


def _make_trainer() -> AccumulationTrainer:
    return AccumulationTrainer(demo.make_model(seed=0, hidden=16), keras.optimizers.Adam(0.02),
                               "mse", accumulation_steps=2)


def _check_made_up_updates(make_early_stop) -> None:
    """Four updates by hand, to a real trainer that is not training: the specific fault, if
    any (a real one, so that `trainer.model` and the rest are there as the lesson shows them)."""
    trainer = _make_trainer()
    callback = make_early_stop(trainer, _THRESHOLD)
    attempted(callback)
    if not callable(callback):
        raise Incorrect("make_early_stop should return a function, the callback to pass as "
                        f"on_update=; it returned a {type(callback).__name__}")
    for number, loss in enumerate(_LOSSES, start=1):
        callback(_update(number, loss))
        if number < len(_LOSSES) and trainer.stop_training:
            advice = " (0.5 is not below 0.5: compare with <)" if loss == _THRESHOLD else ""
            raise Incorrect(f"with threshold {_THRESHOLD}, it stopped the trainer after update "
                            f"{number}, whose loss {loss} is not below the threshold{advice}")
    if not trainer.stop_training:
        raise Incorrect(f"after an update with loss {_LOSSES[-1]} < threshold {_THRESHOLD}, "
                        "trainer.stop_training is still False: set it on the trainer given to "
                        "make_early_stop")
    if not hasattr(callback, "records"):
        raise Incorrect("the callback has no `records` attribute: after `def on_update(update): "
                        "...`, write `on_update.records = records`")
    expected = [(number, loss) for number, loss in enumerate(_LOSSES, start=1)]
    if list(callback.records) != expected:
        raise Incorrect(f"after four updates with losses {', '.join(map(str, _LOSSES))}, "
                        f"records should be {expected} (update.update, update.loss); they are "
                        f"{callback.records!r}")
    # A graph call that runs several windows (windows_per_call) reports each update after it:
    # the callback may hear of one more, above the threshold, after it asked to stop.
    callback(_update(len(_LOSSES) + 1, _AFTER))
    if not trainer.stop_training:
        raise Incorrect(f"after update {len(_LOSSES)} (loss {_LOSSES[-1]}, below {_THRESHOLD}) "
                        f"came update {len(_LOSSES) + 1}, loss {_AFTER}, as when one graph call "
                        "runs several windows (windows_per_call) and the callback hears of each "
                        "after it: trainer.stop_training went back to False. Set it to True "
                        "once a loss is below the threshold, and never back to False")


def _check_early_stop(make_early_stop) -> str:
    _check_made_up_updates(make_early_stop)
    x, y = demo.make_data(512, seed=0)
    micro_batches = demo.make_dataset(x, y, 32)
    full = _make_trainer().fit(micro_batches, epochs=_EPOCHS, verbose=0)  # uninterrupted
    threshold = sorted(full.loss)[len(full.loss) // 2]  # about the median: stops mid-run
    first_below = next(i for i, loss in enumerate(full.loss) if loss < threshold) + 1
    trainer = _make_trainer()
    callback = make_early_stop(trainer, threshold)
    history = trainer.fit(micro_batches, epochs=_EPOCHS, on_update=callback, verbose=0)
    if list(callback.records) != [(u.update, u.loss) for u in history.updates]:
        raise Incorrect("in a real fit, records should hold (update, loss) for this fit's updates "
                        f"only; it holds {len(callback.records)} pairs for {len(history)} updates "
                        "(make a new list in each make_early_stop call)")
    if len(history) != first_below:
        raise Incorrect(f"in a real fit with threshold {threshold:.4f}, the first update below it "
                        f"is update {first_below}, but training stopped after {len(history)}")
    return (f"a real fit stopped after update {first_below} of {len(full)}, the first with a "
            f"loss below {threshold:.4f}, and records holds its {first_below} (update, loss) pairs")


early_stop = Exercise(
    "12 early stop",
    _check_early_stop,
    hints=[
        "Inside make_early_stop, make a list and define `def on_update(update): ...` that appends "
        "to it; return on_update. `update.update` is the update's number, `update.loss` its loss.",
        "The callback reaches the list and the trainer through the enclosing function (a "
        "closure). A function is an object: `on_update.records = records` makes the list its "
        "attribute.",
        "Stop with `trainer.stop_training = True` when `update.loss < threshold` (strictly below); "
        "fit finishes the current window and returns.",
    ],
    solution_file="12_callback.py",
)
