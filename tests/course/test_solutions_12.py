"""The exercise solution of lesson 12 does what its exercise asks.

Each is checked against an independent computation: known sleep durations,
the trainer's own effective batch, a real training run, hand-worked numbers.
"""

import importlib
import pathlib
import sys
import types

import keras
import numpy as np

import gaviz

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

callback = importlib.import_module("solutions.12_callback")


def _update(number, loss):
    return gaviz.Update(update=number, epoch=1, loss=loss, samples=8,
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
