"""The dashboard and the live plot, driven headless (no display, no browser)."""

import io

import keras
import matplotlib.image
import numpy as np
import pytest
import tensorflow as tf

import gaviz
from gaviz.plotting import curve

FAST = dict(preset="small", epochs=1, steps=(1, 2), min_redraw_interval=0.0)


def run_to_end(board, timeout=120):
    assert board.run()
    assert board.wait(timeout), "the dashboard's run did not finish"


def test_plan_shows_effective_batches_before_running():
    board = gaviz.dashboard(steps=(1, 4), hold="effective", effective_batch_size=128)
    assert [p.micro_batch_size for p in board.planned_runs()] == [128, 32]
    assert "k=4, micro 32, effective 128" in board.plan.value
    board.hold.value = "micro"
    board.micro_batch_size.value = 16
    assert "k=4, micro 16, effective 64" in board.plan.value


def test_run_plots_exactly_the_histories():
    board = gaviz.dashboard(**FAST)
    run_to_end(board)
    assert "finished" in board.status.value
    lines = board.figure.lines
    assert set(lines) == {r.plan.label for r in board.results}
    for result in board.results:
        assert len(result.history) > 0
        xs, ys = curve(result.history, "samples")
        np.testing.assert_array_equal(lines[result.plan.label].get_xdata(), xs)
        np.testing.assert_array_equal(lines[result.plan.label].get_ydata(), ys)
    image = matplotlib.image.imread(io.BytesIO(board.image.value), format="png")
    assert image.shape[0] > 100 and board.image.layout.display is None
    assert board.summary.value.count("<tr>") == 3
    # One number of decimals for the whole final-loss column (never 1.3 beside 2.048).
    finals = [row.split("<td>")[6].split("</td>")[0] for row in board.summary.value.split("<tr>")[2:]]
    assert len({len(text.split(".")[1]) for text in finals}) == 1, finals
    assert not board.run_button.disabled and board.stop_button.disabled
    assert board.progress.value == sum(len(r.history) for r in board.results)


def test_same_effective_batch_curves_coincide_in_the_dashboard():
    board = gaviz.dashboard(**FAST)
    run_to_end(board)
    a, b = board.results
    np.testing.assert_allclose(a.history.loss, b.history.loss, rtol=1e-5)


def test_stop_mid_run_leaves_the_trainer_consistent():
    board = gaviz.dashboard(preset="regression", epochs=30, steps=(1, 2, 4),
                            min_redraw_interval=0.0)
    assert board.run()
    for _ in range(600):
        if board.results[0].history:
            break
        tf.timestamp()  # let the training thread run
        board.wait(0.05)
    board.stop()
    assert board.wait(60)
    assert "stopped" in board.status.value
    first = board.results[0]
    trainer_updates = len(first.history)
    assert 0 < trainer_updates < first.plan.updates_per_epoch * 30
    assert all(not r.history for r in board.results[1:])  # later runs never started
    # Every setting is back, but the micro-batch: holding the effective batch decides it.
    assert [c for c in board._settings if c.disabled] == [board.micro_batch_size]


def test_controls_are_disabled_while_running():
    board = gaviz.dashboard(**FAST)
    assert board.run()
    disabled_during = board.steps.disabled and board.run_button.disabled
    board.wait(120)
    assert disabled_during and not board.steps.disabled


def test_micro_batch_larger_than_the_data_is_a_message():
    board = gaviz.dashboard(preset="small", hold="micro", micro_batch_size=5000)
    assert not board.run()
    assert "larger than the data set" in board.status.value
    assert "larger than the data set" in board.plan.value


def test_diverging_run_is_reported_in_the_dashboard():
    board = gaviz.dashboard(preset="small", epochs=5, steps=(8,), optimizer="sgd",
                            learning_rate=1.0, trainer="missing_normalization",
                            min_redraw_interval=0.0)
    run_to_end(board)
    assert "diverged: Update" in board.status.value and "non-finite" in board.status.value
    assert "color:#b00" in board.status.value
    # The failed update was not applied: the model is still usable.
    assert all(np.all(np.isfinite(w)) for w in board.results[0].trainer.model.get_weights())


def test_pitfall_runs_report_their_distance_from_exact():
    board = gaviz.dashboard(preset="small", epochs=1, steps=(4,), trainer="missing_normalization",
                            optimizer="sgd", learning_rate=0.001, min_redraw_interval=0.0)
    run_to_end(board)
    assert board.results[0].distance_from_exact > 0
    exact = gaviz.dashboard(preset="small", epochs=1, steps=(4,), trainer="exact")
    run_to_end(exact)
    assert exact.results[0].distance_from_exact is None


def test_live_plot_callback_for_your_own_fit(regression_data):
    x, y = regression_data
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    live = gaviz.LivePlot(label="mine", x_axis="updates", min_interval=0.0)
    trainer = gaviz.AccumulationTrainer(model, keras.optimizers.SGD(0.1), "mse", 2)
    history = trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), on_update=live)
    assert live.history.loss == history.loss
    np.testing.assert_array_equal(live.figure.lines["mine"].get_ydata(), history.loss)
    assert live.image.value[:4] == b"\x89PNG"
    assert live.figure.ax.get_title() == "mine: loss, drawn as it trains"


def test_a_new_live_plot_shows_its_empty_axes_not_a_broken_image():
    live = gaviz.LivePlot(label="mine")
    assert live.image.value[:4] == b"\x89PNG"
    bundle = live._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "image/png" in bundle
    assert "Image(value=" not in bundle["text/plain"]


def test_a_saved_notebook_shows_the_finished_dashboard_once_as_html():
    board = gaviz.dashboard(**FAST)
    before = board._repr_mimebundle_()
    assert "<img" not in before["text/html"] and "VBox(" not in before["text/plain"]
    run_to_end(board)
    after = board._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in after
    page = after["text/html"]
    assert page.count("<img") == 1 and page.count("<table>") == 1 and "finished" in page


@pytest.mark.parametrize("values, expected", [
    ([1.3, 2.048, 0.02214], ["1.3000", "2.0480", "0.0221"]),
    ([12.5, None], ["12.5", "–"]),
    ([0.0, 1e-12], ["0.00000000", "0.00000000"])])
def test_a_column_of_numbers_shares_one_format(values, expected):
    from gaviz.widgets.dashboard_widget import column_text

    assert column_text(values) == expected


@pytest.mark.parametrize("setting", ["stepz", "wide"])  # wide: a local of __init__
def test_unknown_dashboard_setting(setting):
    with pytest.raises(TypeError, match=rf"unknown settings: \['{setting}'\]"):
        gaviz.dashboard(**{setting: (1,)})


def test_changing_the_x_axis_redraws_finished_runs():
    board = gaviz.dashboard(**FAST)
    run_to_end(board)
    board.x_axis.value = "updates"
    line = board.figure.lines[board.results[0].plan.label]
    np.testing.assert_array_equal(line.get_xdata(), range(1, len(board.results[0].history) + 1))


def test_a_warm_up_of_k_plots_a_ramp():
    board = gaviz.dashboard(preset="small", epochs=4, steps=(8,), hold="micro",
                            micro_batch_size=32, warmup=True, min_redraw_interval=0.0)
    assert "k=1→8, micro 32" in board.plan.value
    run_to_end(board)
    ks = board.results[0].history.accumulation_steps
    assert sorted(set(ks)) == [1, 2, 4, 8] and ks == sorted(ks)
