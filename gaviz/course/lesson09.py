"""Lesson 09's exercises: a model of your own trained by gaviz's trainer and its History read,
and the median time of a training epoch, after a warm-up."""

import statistics
import time

import keras
import numpy as np

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, NotAttempted, attempted
from gaviz.course.graph import expected_retracing
from gaviz.course.loop import max_difference
from gaviz.training.fit.history import History, Update

#: A fake epoch's durations: the warm-up first, then five timed epochs. Each usual mistake
#: gives its own number: the median of the timed calls 0.05 s; their mean 0.086, total 0.43,
#: fastest 0.01, slowest 0.25, last 0.09; the median of all six calls 0.07.
_DURATIONS = (0.40, 0.01, 0.25, 0.05, 0.03, 0.09)
_REPEATS = len(_DURATIONS) - 1
_TIMED = _DURATIONS[1:]
_READINGS = {  # what a function returns -> what it computed
    "median": statistics.median(_TIMED),
    "the mean of the timed calls: return their median (a median ignores the odd slow epoch "
    "of a busy machine)": statistics.mean(_TIMED),
    "the total of the timed calls: return their median": sum(_TIMED),
    "the fastest timed call: return the median": min(_TIMED),
    "the slowest timed call: return the median": max(_TIMED),
    "the last timed call: keep every call's time in a list and return their median": _TIMED[-1],
    "the warm-up call (0.40 s) is in the median; time only the calls after it":
        statistics.median(_DURATIONS),
}


def _check_median_epoch_seconds(median_epoch_seconds) -> str:
    durations, calls = iter(_DURATIONS), []

    def fake_epoch():
        calls.append(1)
        time.sleep(next(durations, 0.0))

    result = median_epoch_seconds(fake_epoch, _REPEATS)
    attempted(result)
    if len(calls) != _REPEATS + 1:
        raise Incorrect(f"expected 1 untimed warm-up call and {_REPEATS} timed calls, got "
                        f"{len(calls)} calls")
    # Sleeping takes a little longer than asked: the nearest reading is what was computed.
    what = min(_READINGS, key=lambda reading: abs(float(result) - _READINGS[reading]))
    timed = ", ".join(f"{d:g}" for d in _TIMED)
    if what == "median" and abs(float(result) - _READINGS[what]) < 0.01:
        return f"the median of the timed calls ({timed} s): {result:.3f} s"
    if what == "median":
        raise Incorrect(f"expected the median of the timed calls ({timed} s), about "
                        f"{_READINGS[what]:g} s; got {result:.3f} s")
    raise Incorrect(f"{result:.3f} s for timed calls of {timed} s is {what}")


median_epoch_seconds = Exercise(
    "09 median_epoch_seconds", _check_median_epoch_seconds,
    hints=["Call `fit_once()` once before timing anything: the first call traces the graph.",
           "Time each of the `repeats` calls with `time.perf_counter()` before and after, and "
           "return `statistics.median` of the list."],
    solution_file="09_timing.py")


# ------------------------------------------------------------- your model, with gaviz's trainer

EFFECTIVE_BATCH, MICRO_BATCH, EPOCHS = 256, 32, 3
#: 600 samples: two full windows of 256 and a partial one of 88 per epoch.
SAMPLES = 600
_RANDOM = (keras.layers.Dropout, keras.layers.GaussianNoise, keras.layers.GaussianDropout,
           keras.layers.AlphaDropout, keras.layers.SpatialDropout1D)


def _data():
    x, y = demo.make_data(SAMPLES, seed=4)
    return x, y, demo.make_data(200, seed=5)


def _build(make_my_model):
    """``make_my_model()`` with Keras's seed set first: two calls, the same initial weights."""
    keras.utils.set_random_seed(4)
    return make_my_model()


def _all_layers(model):
    """Every layer of ``model``, nested models' layers included."""
    for layer in getattr(model, "layers", []):
        yield layer
        yield from _all_layers(layer)


def _check_model(model) -> None:
    if model is None:
        raise NotAttempted("make_my_model still returns nothing")
    if not isinstance(model, keras.Model):
        raise Incorrect(f"make_my_model should return a Keras model, got {type(model).__name__}")
    if not model.compiled:
        raise Incorrect("compile the model in make_my_model: gaviz's trainer takes the "
                        "optimizer, loss and metrics from compile")
    if getattr(model.optimizer, "gradient_accumulation_steps", None):
        raise Incorrect("the optimizer must not have gradient_accumulation_steps: gaviz's "
                        "trainer accumulates, and Keras's built-in would accumulate again")
    for layer in _all_layers(model):
        if isinstance(layer, keras.layers.BatchNormalization) or isinstance(layer, _RANDOM):
            raise Incorrect(f"your model has a {type(layer).__name__} layer: it sees "
                            "micro-batches, not the big batch, so the check cannot compare "
                            "with Model.fit (lesson 11). Leave it out for this exercise")


def _check_history(history) -> None:
    if history is None:
        raise NotAttempted("fit_accumulated still returns nothing: return what fit returns")
    if not hasattr(history, "updates"):
        raise Incorrect("that History is Model.fit's: wrap the model in "
                        "gaviz.AccumulationTrainer(model, accumulation_steps=...) and return "
                        "what its fit returns")
    if len(history.epoch) != EPOCHS:
        raise Incorrect(f"expected {EPOCHS} epochs, the History holds {len(history.epoch)}")
    first = [u.samples for u in history.updates if u.epoch == 1]
    if first[0] == MICRO_BATCH:
        raise Incorrect("each update averaged 32 samples: the effective batch is 256, so "
                        "accumulation_steps = 256 / 32 = 8")
    if first[0] > EFFECTIVE_BATCH:
        raise Incorrect(f"the first update averaged {first[0]} samples, more than 256: "
                        "batch_size is the micro-batch, 32, and accumulation_steps=8 makes "
                        "the 256")
    if first != [256, 256, 88]:
        raise Incorrect(f"the first epoch's updates averaged {first} samples; expected "
                        "[256, 256, 88]: 600 samples in windows of 8 micro-batches of 32")
    if "val_loss" not in history.history:
        raise Incorrect("history.history has no val_loss: pass validation_data to fit")


def _check_matches_model_fit(make_my_model, history) -> None:
    x, y, validation = _data()
    reference = _build(make_my_model)
    expected = reference.fit(x, y, batch_size=EFFECTIVE_BATCH, epochs=EPOCHS, shuffle=False,
                             validation_data=validation, verbose=0)
    for name, values in expected.history.items():
        got = history.history.get(name)
        if got is None or not np.allclose(got, values, rtol=1e-4, atol=1e-6):
            raise Incorrect(
                f"history.history[{name!r}] is {np.round(got, 4).tolist() if got else got}; "
                f"Model.fit(batch_size=256, shuffle=False) gives {np.round(values, 4).tolist()}."
                " Pass shuffle=False: fit shuffles arrays every epoch, as Model.fit does")
    difference = max_difference(history.model, reference)
    if difference > 1e-4:
        raise Incorrect(f"the weights end {difference:.1e} from Model.fit(batch_size=256)'s")


#: A made-up run of 4 epochs, 3 updates each: per epoch, the training loss is lowest in epoch 3,
#: val_loss lowest in epoch 2 (0.75) and highest in epoch 4; per update, the loss is lowest at
#: update 8 (in epoch 3). Each usual mistake gives its own answer.
_EPOCH_LOSS, _VAL_LOSS = [3.0, 2.0, 1.0, 1.5], [2.0, 0.75, 2.5, 3.0]
_UPDATE_LOSSES = [3.2, 3.0, 2.8, 2.2, 2.0, 1.8, 1.1, 0.9, 1.0, 1.6, 1.5, 1.4]


def _made_up_history() -> History:
    """A gaviz History, as fit returns it, of the made-up run above."""
    history = History([Update(update=number, epoch=(number - 1) // 3 + 1, loss=loss,
                              samples=256, micro_steps=8,
                              samples_seen=256 * number, seconds=0.0)
                       for number, loss in enumerate(_UPDATE_LOSSES, start=1)])
    history.epoch = [0, 1, 2, 3]
    history.history = {"loss": list(_EPOCH_LOSS), "val_loss": list(_VAL_LOSS)}
    return history


def _check_best_epoch(best_epoch) -> None:
    """Incorrect unless ``best_epoch`` reads a made-up History right, naming the usual faults."""
    answer = best_epoch(_made_up_history())
    attempted(answer)
    said = (f"for a made-up run of 4 epochs, val_loss {_VAL_LOSS} (history.history) and loss "
            f"{_EPOCH_LOSS} per epoch, best_epoch returned {answer!r}")
    faults = {
        0.75: "the lowest val_loss itself: return the epoch it belongs to",
        1: "epochs count from 1 here, as Keras prints them ('Epoch 2/4'); an index counts from 0",
        3: "the epoch of the lowest *training* loss: the best epoch is the one that does best on "
           "data it did not train on, history.history['val_loss']",
        4: "the epoch of the *highest* val_loss (and the last): the best is the lowest",
        8: "the number of the update with the lowest loss: history.loss holds one training loss "
           "per *update*; the best epoch is read per epoch, from val_loss",
        7: "an index into history.loss, one training loss per *update*: the best epoch is read "
           "per epoch, from val_loss",
    }
    if isinstance(answer, (int, float, np.integer, np.floating)) and not isinstance(answer, bool):
        for value, why in faults.items():
            if np.isclose(answer, value):
                raise Incorrect(f"{said}: {why}")
    if answer != 2:
        raise Incorrect(f"{said}; the best epoch, counted from 1, is the one with the lowest "
                        "val_loss")


def _check_your_model(make_my_model, fit_accumulated, best_epoch) -> str:
    model = _build(make_my_model)
    _check_model(model)
    x, y, validation = _data()
    # Each check trains new models, so their graphs trace anew: TensorFlow's warning about
    # retracing says nothing about the learner's code here.
    with expected_retracing():
        history = fit_accumulated(model, x, y, validation)
    _check_history(history)
    _check_best_epoch(best_epoch)
    with expected_retracing():
        _check_matches_model_fit(make_my_model, history)
    best = best_epoch(history)
    return (f"your model ({model.count_params():,} weights) trained by gaviz: {len(history)} "
            f"updates in {EPOCHS} epochs (each 256, 256, 88 samples), every history.history "
            f"entry as Model.fit(batch_size=256, shuffle=False)'s; best_epoch reads epoch {best}")


your_model = Exercise(
    "09 your model, accumulated", _check_your_model,
    hints=["make_my_model: keras.Sequential([keras.Input((8,)), ..., keras.layers.Dense(1)]), "
           "then model.compile(optimizer=..., loss='mse'), and return the model.",
           "fit_accumulated: gaviz.AccumulationTrainer(model, accumulation_steps=8).fit(x, y, "
           "batch_size=32, epochs=3, shuffle=False, validation_data=validation_data, "
           "verbose=0); return what fit returns.",
           "best_epoch: history.history['val_loss'] is a list, one value per epoch; the index "
           "of its smallest value, plus 1."],
    solution_file="09_your_model.py")
