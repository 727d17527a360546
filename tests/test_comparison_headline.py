"""Comparison.plot's title carries the number that tells each pitfall's story."""

import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

import gaviz
from gaviz.pitfalls import PITFALLS
from helpers import make_mlp
from reference import dataset_of, micro_batches

K = 4


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


def test_missing_reset_shows_the_updates_growing(regression_data):
    result = compare("missing_reset", [6] * 16, regression_data)  # 4 full windows
    growth = result.update_norms[-1] / result.update_norms[0]
    assert growth > 3  # update 4 sums the gradients of 4 windows
    assert title(result) == (f"MissingReset: update 4 is {growth:.3g}x update 1 "
                             f"(exact: {result.exact_update_norms[-1] / result.exact_update_norms[0]:.2g}x)")
    assert result.first_update_relative_error == 0.0  # what the title said before: "off by 0"


@pytest.mark.parametrize("name", ["missing_normalization", "update_every_micro_step"])
def test_too_large_steps_show_the_effective_learning_rate(name, regression_data):
    result = compare(name, [8] * 12, regression_data, learning_rate=1e-3)
    ratio = result.effective_learning_rate_ratio
    assert ratio == pytest.approx(K if name == "missing_normalization" else K + 1, rel=0.05)
    assert title(result).endswith(f": effective learning rate x{ratio:.3g}")


@pytest.mark.parametrize("name, epochs, updates", [
    ("dropped_tail", 1, 3), ("under_scaled_tail", 1, 4), ("carried_tail", 2, 6)])
def test_tail_pitfalls_show_updates_and_where_the_weights_end(name, epochs, updates, regression_data):
    result = compare(name, [8] * 12 + [4], regression_data, epochs=epochs)  # 3 windows and a tail
    assert len(result.loss) == updates and len(result.exact_loss) == 4 * epochs
    assert result.final_weight_distance > 1e-3
    assert title(result).endswith(
        f": {updates} updates (exact: {4 * epochs}), final weights {result.final_weight_distance:.2g} apart")


def test_other_trainers_keep_the_first_update_error(regression_data):
    result = compare("mean_of_means", [2, 30, 5, 11] * 2 + [4], regression_data)
    assert result.first_update_relative_error > 0.05
    assert title(result) == f"MeanOfMeans: first update off by {result.first_update_relative_error:.2g}"


def test_a_stopped_run_says_so(regression_data):
    result = compare("missing_normalization", [8] * 12, regression_data, learning_rate=3.0, repeat=5)
    assert result.error
    assert title(result).endswith(", then stopped: non-finite")
    assert np.all(np.isfinite(result.loss))
