"""The exercise solution of lesson 09 does what its exercise asks.

Each is checked against an independent computation: known sleep durations,
the trainer's own effective batch, a real training run, hand-worked numbers.
"""

import importlib
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

timing = importlib.import_module("solutions.09_timing")


def test_median_epoch_seconds_warms_up_then_takes_the_median():
    durations = iter([0.30, 0.02, 0.25, 0.04, 0.20, 0.03])  # warm-up, then five timed epochs
    calls = []

    def fake_epoch():
        calls.append(time.perf_counter())
        time.sleep(next(durations))

    result = timing.median_epoch_seconds(fake_epoch, 5)
    assert len(calls) == 6  # one untimed warm-up, five timed
    # The median of the timed 0.02, 0.25, 0.04, 0.20, 0.03 is 0.04. Their mean
    # (0.108), or a median that kept the warm-up (0.12), would be far off.
    assert result == pytest.approx(0.04, abs=0.015)


def test_median_epoch_seconds_rejects_bad_repeats():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="repeats"):
            timing.median_epoch_seconds(lambda: None, bad)
