"""Comparison.plot's title carries the number that tells each pitfall's story.

First on hand-made runs, whose numbers are worked out in the comments and whose
titles are written out in full; then on the pitfalls themselves, whose titles
must carry the number each story predicts (k, k + 1, growing updates).
"""

import re

import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import make_mlp
from reference import dataset_of, micro_batches

import gaviz
from gaviz.gallery.measure import RunTrace, compare_runs
from gaviz.gallery.pitfalls import PITFALLS
from gaviz.training.fit.history import NonFiniteUpdate

K = 4
NUMBER = r"(\d+(?:\.\d+)?(?:e[-+]\d+)?)"


def trace(*steps, failure=None):
    """A run of two weights from (0, 0), moved by each step in turn; loss 1 per update."""
    weights = np.cumsum([(0.0, 0.0), *steps], axis=0)
    return RunTrace(losses=[1.0] * len(steps), weights=list(weights), failure=failure)


EXACT = trace((3, 4), (3, 4), (3, 4), (3, 4))  # four updates of length 5


# ------------------------------------------------------------ hand-made runs


def test_a_growing_update_is_told_as_last_over_first():
    # Updates of length 5, 10, 15, 20: the last is 4x the first; the exact ones stay 5.
    growing = trace((3, 4), (6, 8), (9, 12), (12, 16))
    comparison = compare_runs("MissingReset", growing, EXACT)
    assert comparison.headline == "missing_reset: update 4 is 4x update 1 (exact: 1x)"


@pytest.mark.parametrize("name, said", [("MissingNormalization", "missing_normalization"),
                                        ("UpdateEveryMicroStep", "update_every_micro_step")])
def test_a_longer_step_the_same_way_is_told_as_a_learning_rate(name, said):
    # First step (7.5, 10), length 12.5, along the exact (3, 4) of length 5: x2.5.
    longer = trace((7.5, 10), (3, 4), (3, 4), (3, 4))
    assert compare_runs(name, longer, EXACT).headline == f"{said}: effective learning rate x2.5"


def test_a_step_another_way_falls_back_to_the_first_update_error():
    # (4, -3) against (3, 4): perpendicular, so no learning rate to tell;
    # |(1, -7)| / 5 = sqrt(50) / 5 = 1.414...
    turned = trace((4, -3), (3, 4), (3, 4), (3, 4))
    headline = compare_runs("MissingNormalization", turned, EXACT).headline
    assert headline == "missing_normalization: first update off by 1.4"


@pytest.mark.parametrize("name, said", [("DroppedTail", "dropped_tail"),
                                        ("UnderScaledTail", "under_scaled_tail"),
                                        ("CarriedTail", "carried_tail")])
def test_a_tail_pitfall_is_told_by_its_updates_and_final_weights(name, said):
    # Three updates of (3, 4) end at (9, 12); the exact run's four at (12, 16): 5 apart.
    dropped = trace((3, 4), (3, 4), (3, 4))
    headline = compare_runs(name, dropped, EXACT).headline
    assert headline == f"{said}: 3 updates (exact: 4), final weights 5 apart"


def test_any_other_trainer_is_told_by_its_first_update_error():
    # (3.5, 4) against (3, 4): |(0.5, 0)| / 5 = 0.1 (and a learning-rate ratio
    # would exist, but only the two scaling pitfalls tell it).
    off = trace((3.5, 4), (3, 4), (3, 4), (3, 4))
    assert compare_runs("MeanOfMeans", off, EXACT).headline == "mean_of_means: first update off by 0.1"


def test_a_stopped_run_is_told_after_its_story():
    failure = NonFiniteUpdate(update=3, epoch=1, loss=float("nan"), iterations=2)
    stopped = trace((3.5, 4), (3, 4), failure=failure)
    assert compare_runs("MeanOfMeans", stopped, EXACT).headline == (
        "mean_of_means: first update off by 0.1, then stopped: non-finite")


def test_a_trainer_that_is_no_pitfall_keeps_its_class_name():
    off = trace((3.5, 4), (3, 4), (3, 4), (3, 4))
    assert compare_runs("MyTrainer", off, EXACT).headline == "MyTrainer: first update off by 0.1"


# ------------------------------------------------------------ the pitfalls


def compare(name, sizes, regression_data, epochs=1, learning_rate=1e-2, repeat=1):
    x, y = regression_data
    micro = micro_batches(x[:sum(sizes)], y[:sum(sizes)], sizes) * repeat
    return gaviz.compare_with_exact(PITFALLS[name], make_mlp,
                                    lambda: keras.optimizers.SGD(learning_rate), "mse",
                                    dataset_of(micro), K, epochs=epochs)


def title(result):
    figure = result.plot()
    text = figure._suptitle.get_text()
    plt.close(figure)
    return text


def numbers(pattern, text):
    """The numbers ``pattern``'s groups match in ``text``, which it must match whole."""
    match = re.fullmatch(pattern, text)
    assert match, f"{text!r} does not read {pattern!r}"
    return [float(group) for group in match.groups()]


def test_missing_reset_shows_the_updates_growing(regression_data):
    result = compare("missing_reset", [6] * 16, regression_data)  # 4 full windows
    growth, exact_growth = numbers(
        rf"missing_reset: update 4 is {NUMBER}x update 1 \(exact: {NUMBER}x\)", title(result))
    assert growth > 3  # update 4 sums the gradients of 4 windows
    assert growth == pytest.approx(result.update_norms[-1] / result.update_norms[0], rel=5e-3)
    assert exact_growth == pytest.approx(1, abs=0.3)  # the exact updates barely change
    assert result.first_update_relative_error == 0.0  # what the title said before: "off by 0"


@pytest.mark.parametrize("name, factor", [
    ("missing_normalization", K), ("update_every_micro_step", K + 1)])
def test_too_large_steps_show_the_effective_learning_rate(name, factor, regression_data):
    result = compare(name, [8] * 12, regression_data, learning_rate=1e-3)
    (ratio,) = numbers(rf"{name}: effective learning rate x{NUMBER}", title(result))
    assert ratio == pytest.approx(factor, rel=0.05)


@pytest.mark.parametrize("name, epochs, updates, exact_updates", [
    ("dropped_tail", 1, 3, 4), ("under_scaled_tail", 1, 4, 4), ("carried_tail", 2, 6, 8)])
def test_tail_pitfalls_show_updates_and_where_the_weights_end(
        name, epochs, updates, exact_updates, regression_data):
    result = compare(name, [8] * 12 + [4], regression_data, epochs=epochs)  # 3 windows and a tail
    shown, shown_exact, distance = numbers(
        rf"{name}: {NUMBER} updates \(exact: {NUMBER}\), final weights {NUMBER} apart",
        title(result))
    assert (shown, shown_exact) == (updates, exact_updates)
    assert (len(result.loss), len(result.exact_loss)) == (updates, exact_updates)
    assert distance > 1e-3
    assert distance == pytest.approx(result.final_weight_distance, rel=0.05)


def test_other_trainers_keep_the_first_update_error(regression_data):
    result = compare("mean_of_means", [2, 30, 5, 11] * 2 + [4], regression_data)
    (error,) = numbers(rf"mean_of_means: first update off by {NUMBER}", title(result))
    assert error > 0.05
    assert error == pytest.approx(result.first_update_relative_error, rel=0.05)


def test_a_stopped_run_says_so(regression_data):
    result = compare("missing_normalization", [8] * 12, regression_data, learning_rate=3.0, repeat=5)
    assert result.error
    assert title(result).endswith(", then stopped: non-finite")
    assert np.all(np.isfinite(result.loss))
