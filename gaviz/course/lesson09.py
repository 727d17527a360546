"""Lesson 09's exercise: the median time of a training epoch, after a warm-up."""

import time

from gaviz.course.exercise import Exercise, Incorrect, attempted

#: A fake epoch's durations: the warm-up first, then three timed epochs (median 0.04 s,
#: mean 0.06 s; the median of all four calls is 0.08 s).
_DURATIONS = (0.20, 0.02, 0.12, 0.04)


def _check_median_epoch_seconds(median_epoch_seconds) -> str:
    durations, calls = iter(_DURATIONS), []

    def fake_epoch():
        calls.append(1)
        time.sleep(next(durations, 0.0))

    result = median_epoch_seconds(fake_epoch, 3)
    attempted(result)
    if len(calls) != 4:
        raise Incorrect(f"expected 1 untimed warm-up call and 3 timed calls, got {len(calls)} calls")
    if abs(result - 0.04) < 0.01:
        return f"the median of the timed calls (0.02, 0.12, 0.04 s): {result:.3f} s"
    if abs(result - 0.06) < 0.01:
        raise Incorrect(f"{result:.3f} s is the mean of the timed calls: return their median")
    if abs(result - 0.08) < 0.01:
        raise Incorrect(f"{result:.3f} s: the warm-up call (0.20 s) is in the median; time only "
                        "the calls after it")
    raise Incorrect(f"expected the median of the timed calls, about 0.04 s; got {result:.3f} s")


median_epoch_seconds = Exercise(
    "09 median_epoch_seconds", _check_median_epoch_seconds,
    hints=["Call `fit_once()` once before timing anything: the first call traces the graph.",
           "Time each of the `repeats` calls with `time.perf_counter()` before and after, and "
           "return `statistics.median` of the list."],
    solution_file="09_timing.py")
