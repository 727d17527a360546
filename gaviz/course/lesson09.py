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

#: A fake epoch's durations, the first call slow as a first call that traces is, then the
#: timed ones. Each usual mistake gives its own number, at least 0.03 s from every other: the
#: median of the timed calls 0.11 s; their mean 0.14, total 0.70, fastest 0.03, slowest 0.26,
#: last 0.07; the median of all six calls 0.17; the slow first call timed and a call below the
#: median left out, 0.23.
_DURATIONS = (0.40, 0.26, 0.11, 0.23, 0.03, 0.07)
#: Again with 3 timed calls (median 0.06 s): a number of calls fixed at the lesson's, or the
#: slow first call timed and a call the first run cannot tell (0.26 or 0.23 s, above its
#: median) left out, which gives 0.15 s here.
_FEWER = (0.25, 0.06, 0.15, 0.02)
#: Right answers (perf_counter, perf_counter_ns, monotonic, time.time; statistics.median or
#: sorting) land within 0.22 ms of the median asked for, 5.5 ms with a busy Python thread
#: beside them (measured: a sleeping call wakes late); the nearest wrong reading is 0.03 s
#: away. Half of that: each reading owns what is nearest it.
_TOLERANCE = 0.015


def _readings(durations) -> dict:
    """What a function returns -> what it computed, for one fake run of ``durations``."""
    first, timed = durations[0], durations[1:]
    kept = {statistics.median((first,) + timed[:j] + timed[j + 1:]) for j in range(len(timed))}
    return {  # the first of two equal readings is said: with 3 timed calls, kept is the slowest
        "median": statistics.median(timed),
        **{f"the median of the first call (the warm-up, {first:g} s: tracing, first-call costs) "
           f"and {len(timed) - 1} timed calls, one timed call left out: call fit_once() once, "
           "untimed, then time `repeats` calls after it": value
           for value in kept - {statistics.median(timed)}},
        "the mean of the timed calls: return their median (a median ignores the odd slow epoch "
        "of a busy machine)": statistics.mean(timed),
        "the total of the timed calls: return their median": sum(timed),
        "the fastest timed call: return the median": min(timed),
        "the slowest timed call: return the median": max(timed),
        "the last timed call: keep every call's time in a list and return their median":
            timed[-1],
        f"the median of all {len(durations)} calls: the first (the warm-up, {first:g} s) is in "
        "it; time only the calls after it": statistics.median(durations),
    }


def _run(median_epoch_seconds, durations) -> str:
    """Runs ``median_epoch_seconds`` on a fake epoch that sleeps ``durations``; "" when it
    returns their timed calls' median, else what it computed instead."""
    sleeps, calls = iter(durations), []
    repeats = len(durations) - 1

    def fake_epoch():
        calls.append(1)
        time.sleep(next(sleeps, 0.0))

    result = median_epoch_seconds(fake_epoch, repeats)
    attempted(result)
    if len(calls) != repeats + 1:
        fixed = "" if repeats == _REPEATS else (
            f"; with repeats={repeats}, time that many: the argument, not the lesson's number")
        raise Incorrect(f"expected 1 untimed warm-up call and {repeats} timed calls, got "
                        f"{len(calls)} calls{fixed}")
    readings = _readings(durations)
    timed = ", ".join(f"{d:g}" for d in durations[1:])
    said = f"{float(result):.3f} s for timed calls of {timed} s"
    if abs(float(result) - readings["median"]) <= _TOLERANCE:
        return f"the median of the timed calls ({timed} s): {float(result):.3f} s"
    if float(result) < min(durations) / 2:
        raise Incorrect(f"{said} is about 0 s: CPU time (time.process_time counts what the "
                        "processor did for this process, and these calls only wait; an epoch "
                        "waits too, for data and devices): time the wall clock, "
                        "time.perf_counter()")
    what = min(readings, key=lambda reading: abs(float(result) - readings[reading]))
    if float(result) > 10 * sum(durations):  # no reading is above the total: another unit
        what = min(readings, key=lambda reading: abs(float(result) / 1000 - readings[reading]))
        computed = "their median" if what == "median" else what
        raise Incorrect(f"{float(result):.1f} for timed calls of {timed} s is {computed}, in "
                        "milliseconds: return seconds, as time.perf_counter() counts them (the "
                        "lesson prints milliseconds itself)")
    if what == "median":
        raise Incorrect(f"expected the median of the timed calls ({timed} s), about "
                        f"{readings[what]:g} s; got {float(result):.3f} s")
    raise Incorrect(f"{said} is {what}")


_REPEATS = len(_DURATIONS) - 1


def _check_median_epoch_seconds(median_epoch_seconds) -> str:
    said = _run(median_epoch_seconds, _DURATIONS)
    _run(median_epoch_seconds, _FEWER)
    return said


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


#: Right answers (the solution, a functional model, another Sequential) give every history entry
#: within 3.5e-7 of Model.fit's, relatively, and weights within 1.8e-7 (measured); windows of 7
#: micro-batches for 8 (refused before, by their sizes) would land 2.8e-3 away, and 7.5e-3 in the
#: weights. 1e-4 is between, for both.
_HISTORY_RTOL, _WEIGHTS_TOLERANCE = 1e-4, 1e-4


def _check_matches_model_fit(make_my_model, history) -> None:
    x, y, validation = _data()
    reference = _build(make_my_model)
    expected = reference.fit(x, y, batch_size=EFFECTIVE_BATCH, epochs=EPOCHS, shuffle=False,
                             validation_data=validation, verbose=0)
    for name, values in expected.history.items():
        got = history.history.get(name)
        if got is None or not np.allclose(got, values, rtol=_HISTORY_RTOL, atol=1e-6):
            raise Incorrect(
                f"history.history[{name!r}] is {np.round(got, 4).tolist() if got else got}; "
                f"Model.fit(batch_size=256, shuffle=False) gives {np.round(values, 4).tolist()}."
                " Pass shuffle=False: fit shuffles arrays every epoch, as Model.fit does")
    difference = max_difference(history.model, reference)
    if not difference <= _WEIGHTS_TOLERANCE:
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
    if _build(make_my_model) is model:
        raise Incorrect("make_my_model returned the same model twice: a model made once, "
                        "outside it, trains on from wherever the last training left it. Build "
                        "and compile a new model in each call, so that each run starts fresh "
                        "(the check trains one through gaviz and one through Model.fit)")
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
