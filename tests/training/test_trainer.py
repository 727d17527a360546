"""The redesigned core: schedules of k, several windows per call, arrays, errors."""

import subprocess
import sys

import keras
import numpy as np
import pytest
from helpers import assert_same_weights, make_mlp, start_of
from reference import dataset_of, group_windows, max_weight_difference, micro_batches, train_big_batches

import gaviz
from gaviz.gallery.pitfalls import PITFALLS

MSE = keras.losses.mean_squared_error


@pytest.fixture
def micro(regression_data):
    x, y = regression_data
    return micro_batches(x, y, [8] * 12 + [4])  # 13 micro-batches


def reference_weights(micro, windows):
    model = make_mlp()
    train_big_batches(model, keras.optimizers.Adam(0.01), MSE, windows)
    return model


def test_a_schedule_of_k_is_exact_per_epoch_and_never_retraces(micro):
    schedule = {1: 1, 2: 2, 3: 4, 4: 4}.__getitem__  # a batch-size warm-up
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", schedule)
    history = trainer.fit(dataset_of(micro), epochs=4)
    windows = [w for epoch in (1, 2, 3, 4) for w in group_windows(micro, schedule(epoch), "flush", 1)]
    assert_same_weights(model, reference_weights(micro, windows), start, terms=4 * 8)
    assert trainer.tracing_count == 1  # k is a graph value
    assert history.accumulation_steps == [1] * 13 + [2] * 7 + [4] * 4 + [4] * 4
    assert history.micro_steps[13:20] == [2] * 6 + [1]
    assert trainer.effective_batch_size(8, epoch=2) == 16


def test_a_schedule_returning_a_bad_k_names_the_epoch(micro):
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse",
                                        lambda epoch: 0 if epoch == 2 else 4)
    with pytest.raises(ValueError, match=r"`accumulation_steps\(2\)` must be an integer >= 1"):
        trainer.fit(dataset_of(micro), epochs=2)


@pytest.mark.parametrize("windows_per_call", [1, 2, 3, 100, "auto"])
def test_windows_per_call_changes_no_number(micro, windows_per_call):
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", 4,
                                        tail="carry", windows_per_call=windows_per_call)
    history = trainer.fit(dataset_of(micro), epochs=3)
    assert len(history) == int(trainer.optimizer.iterations.numpy()) == 9
    reference = reference_weights(micro, group_windows(micro, 4, "carry", 3))
    assert_same_weights(model, reference, start, terms=4 * 8)


def test_auto_grows_the_calls_when_nobody_listens(regression_data):
    x, y = regression_data
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.01), "mse", 1)
    trainer.fit(np.tile(x, (8, 1)), np.tile(y, (8, 1)), batch_size=4, epochs=2)
    assert trainer.call_size.size > 1
    # A listener gets each update before the next one is applied.
    assert trainer.call_size.auto
    seen = []
    trainer.fit(x, y, batch_size=4,
                on_update=lambda u: seen.append(int(trainer.optimizer.iterations.numpy())))
    assert seen == list(range(seen[0], seen[0] + len(seen)))


def test_stop_lands_at_the_end_of_a_call_with_every_update_recorded(micro):
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2,
                                        windows_per_call=3)
    seen = []

    def on_update(update):
        seen.append(update.update)
        if update.update == 2:
            trainer.stop_training = True

    history = trainer.fit(dataset_of(micro), epochs=5, on_update=on_update)
    assert seen == [1, 2, 3]  # the call that applied update 2 also applied update 3
    assert len(history) == int(trainer.optimizer.iterations.numpy()) == 3


def test_non_finite_update_carries_its_numbers(micro):
    poisoned = list(micro)
    poisoned[5] = (np.full_like(poisoned[5][0], np.nan), poisoned[5][1])  # window 2 when k=4
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 4,
                                        windows_per_call=8)
    with pytest.raises(gaviz.NonFiniteUpdate) as caught:
        trainer.fit(dataset_of(poisoned))
    error = caught.value
    assert isinstance(error, FloatingPointError)
    assert (error.update, error.epoch, error.iterations) == (2, 1, 1)
    assert np.isnan(error.loss)
    assert int(trainer.optimizer.iterations.numpy()) == 1  # nothing after it either


def test_arrays_are_exact_with_a_ragged_last_micro_batch_and_weights(regression_data):
    x, y = regression_data
    w = np.random.default_rng(1).uniform(size=100).astype("float32")
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", 3)
    history = trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False, sample_weight=w)
    micro = [(x[i:i + 8], y[i:i + 8], w[i:i + 8]) for i in range(0, 100, 8)]
    reference = reference_weights(micro, group_windows(micro, 3, "flush", 2))
    assert_same_weights(model, reference, start, terms=3 * 8)
    assert history.micro_steps == [3, 3, 3, 3, 1] * 2
    assert int(trainer.micro_step.numpy()) == 26


def test_arrays_match_keras_fit_on_the_big_batch(regression_data):
    x, y = regression_data
    model = make_mlp()
    start = start_of(model)
    gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", 4).fit(
        x, y, batch_size=5, epochs=2, shuffle=False)
    keras_model = make_mlp()
    keras_model.compile(keras.optimizers.Adam(0.01), "mse")
    keras_model.fit(x, y, batch_size=20, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(model, keras_model, start, terms=20)


def test_shuffled_arrays_are_seeded_and_shuffled(regression_data):
    x, y = regression_data

    def run(shuffle, seed=3):
        keras.utils.set_random_seed(seed)
        model = make_mlp()
        gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.1), "mse", 2).fit(
            x, y, batch_size=10, shuffle=shuffle)
        return model

    assert max_weight_difference(run(True), run(True)) == 0.0
    assert max_weight_difference(run(True), run(False)) > 1e-4


def test_several_inputs_as_a_dict(regression_data):
    x, y = regression_data
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    keras.utils.set_random_seed(0)
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    history = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.1), "mse", 2).fit(
        {"a": x[:, :3], "b": x[:, 3:]}, y, batch_size=10)
    assert len(history) == 5 and history.loss[-1] < history.loss[0]


def test_bad_array_arguments_name_themselves(regression_data, micro):
    x, y = regression_data
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2)
    with pytest.raises(ValueError, match="`y` must be given"):
        trainer.fit(x)
    with pytest.raises(ValueError, match="same number of rows"):
        trainer.fit(x, y[:50])
    with pytest.raises(ValueError, match="`batch_size` must be None when `x` is a tf.data.Dataset"):
        trainer.fit(dataset_of(micro), batch_size=8)
    with pytest.raises(ValueError, match="`y` must be None when `x` is a tf.data.Dataset"):
        trainer.fit(dataset_of(micro), 2)  # the old positional epochs
    with pytest.raises(ValueError, match="`batch_size` must be an integer >= 1"):
        trainer.fit(x, y, batch_size=0)
    with pytest.raises(ValueError, match="`windows_per_call` must be"):
        gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), "mse", 2, windows_per_call=0)


@pytest.mark.parametrize("name, tail", [("dropped_tail", "flush"), ("carried_tail", "drop")])
def test_tail_pitfalls_refuse_another_tail(name, tail):
    with pytest.raises(ValueError, match="`tail` must be"):
        PITFALLS[name](make_mlp(), keras.optimizers.SGD(0.1), "mse", 2, tail=tail)


def test_import_gaviz_loads_no_widgets_or_plotting():
    code = (
        "import sys, tensorflow, keras\n"
        "before = set(sys.modules)\n"
        "import gaviz\n"
        "new = sorted(m for m in set(sys.modules) - before\n"
        "             if m.split('.')[0] in ('ipywidgets', 'matplotlib', 'IPython'))\n"
        "print(new)\n"
        "gaviz.LivePlot\n"
        "print('ipywidgets' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"]
