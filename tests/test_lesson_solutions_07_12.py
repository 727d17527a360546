"""The exercise solutions of lessons 07-10 do what their exercises ask.

Each is checked against an independent computation: known sleep durations,
the trainer's own effective batch, a real training run, hand-worked numbers.
"""

import importlib
import math
import pathlib
import sys
import time
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import gaviz

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))

timing = importlib.import_module("solutions.09_timing")
replicas = importlib.import_module("solutions.10_replicas")
callback = importlib.import_module("solutions.12_callback")
lr_scaling = importlib.import_module("solutions.07_lr_scaling")


# ------------------------------------------------------------------ 07: timing


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


# ---------------------------------------------------------------- 08: replicas


@pytest.mark.parametrize("micro, steps, n", [(16, 4, 2), (4, 16, 8), (32, 1, 1), (3, 5, 7)])
def test_batch_sizes_with_replicas(micro, steps, n):
    assert replicas.global_batch_size(micro, n) == micro * n
    assert replicas.effective_batch_size(micro, steps, n) == micro * steps * n


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_effective_batch_size_agrees_with_the_trainer(steps):
    trainer = gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0, hidden=4),
                                        keras.optimizers.SGD(0.1), "mse", steps)
    assert replicas.effective_batch_size(16, steps, trainer.num_replicas) == \
        trainer.effective_batch_size(16)


def test_batch_sizes_reject_bad_input():
    for bad in [(0, 2), (16, 0), (-4, 2), (16.0, 2), (True, 2)]:
        with pytest.raises(ValueError):
            replicas.global_batch_size(*bad)
    for bad in [(16, 0, 2), (16, 4, 0), (0, 4, 2), (16, 2.0, 2)]:
        with pytest.raises(ValueError):
            replicas.effective_batch_size(*bad)


# ---------------------------------------------------------------- 09: callback


def _update(number, loss):
    return gaviz.Update(update=number, epoch=1, loss=loss, effective_batch_size=8,
                        micro_steps=2, samples_seen=8 * number, seconds=0.0)


def test_callback_records_and_stops_below_the_threshold():
    trainer = types.SimpleNamespace(stop_training=False)
    on_update = callback.make_early_stop(trainer, 0.5)
    for number, loss in enumerate([2.0, 0.9, 0.5], start=1):
        on_update(_update(number, loss))
        assert trainer.stop_training is False  # 0.5 is not below 0.5
    on_update(_update(4, 0.49))
    assert trainer.stop_training is True
    assert on_update.records == [(1, 2.0), (2, 0.9), (3, 0.5), (4, 0.49)]


def test_callback_stops_a_real_fit_at_the_first_low_loss():
    x, y = gaviz.demo.make_data(512, seed=0)
    micro_batches = gaviz.demo.make_dataset(x, y, 32)

    def make_trainer():
        return gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0, hidden=16),
                                         keras.optimizers.Adam(0.02), "mse", 2)

    full = make_trainer().fit(micro_batches, epochs=8)  # the independent record
    threshold = float(np.median(full.loss))
    first_below = next(i for i, loss in enumerate(full.loss) if loss < threshold)
    assert first_below < len(full) - 1  # the early stop has something to cut

    trainer = make_trainer()
    on_update = callback.make_early_stop(trainer, threshold)
    history = trainer.fit(micro_batches, epochs=8, on_update=on_update)
    assert len(history) == first_below + 1
    assert int(trainer.optimizer.iterations.numpy()) == first_below + 1
    assert on_update.records == [(u.update, u.loss) for u in history.updates]
    np.testing.assert_allclose([loss for _, loss in on_update.records],
                               full.loss[: first_below + 1], rtol=1e-6)


# -------------------------------------------------------------- 10: lr scaling


def test_scaled_learning_rate_rules():
    f = lr_scaling.scaled_learning_rate
    assert f(0.1, 32, 128) == pytest.approx(0.4)
    assert f(0.1, 32, 128, rule="linear") == pytest.approx(0.4)
    assert f(0.1, 32, 128, rule="sqrt") == pytest.approx(0.2)
    assert f(0.1, 256, 64) == pytest.approx(0.025)          # smaller batch, smaller rate
    assert f(0.1, 256, 64, rule="sqrt") == pytest.approx(0.05)
    assert f(3e-4, 512, 512, rule="sqrt") == pytest.approx(3e-4)
    for base_lr, base, effective in [(0.02, 32, 96), (1e-3, 10, 7)]:
        assert f(base_lr, base, effective, "sqrt") == pytest.approx(
            base_lr * math.sqrt(effective) / math.sqrt(base))


def test_scaled_learning_rate_rejects_bad_input():
    f = lr_scaling.scaled_learning_rate
    with pytest.raises(ValueError, match="rule"):
        f(0.1, 32, 128, rule="cubic")
    for bad in [(0.0, 32, 128), (0.1, 0, 128), (0.1, 32, 0), (-0.1, 32, 128)]:
        with pytest.raises(ValueError):
            f(*bad)
