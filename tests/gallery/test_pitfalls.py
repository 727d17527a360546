"""Each pitfall produces its own specific wrong number; the exact trainer does not."""

import inspect
import warnings

import keras
import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
import tensorflow as tf
from helpers import make_mlp
from reference import dataset_of, micro_batches

import gaviz
from gaviz.gallery.measure import flat_weights as flat
from gaviz.gallery.pitfalls import PITFALLS

K = 4
LR = 1e-3


def sgd(**kwargs):
    return keras.optimizers.SGD(LR, **kwargs)


def assert_step(actual, expected):
    """Steps are ~1e-4 on weights ~1: compare as vectors, at float32's resolution."""
    assert np.linalg.norm(actual - expected) < 2e-3 * np.linalg.norm(expected)


def compare(name, micro, epochs=1, optimizer=sgd, model=make_mlp, **kwargs):
    cls = gaviz.AccumulationTrainer if name == "exact" else PITFALLS[name]
    return gaviz.compare_with_exact(cls, model, optimizer, "mse", dataset_of(micro), K,
                                    epochs=epochs, **kwargs)


@pytest.fixture
def equal_micro(regression_data):
    x, y = regression_data
    return micro_batches(x[:96], y[:96], [8] * 12)  # 3 full windows


@pytest.fixture
def ragged_micro(regression_data):
    x, y = regression_data
    return micro_batches(x, y, [2, 30, 5, 11] * 2 + [4])


def test_gallery_names_and_labels():
    assert set(PITFALLS) == {
        "missing_reset", "missing_normalization", "dropped_tail", "update_every_micro_step",
        "zeroed_weights", "mean_of_means", "per_micro_batch_clipping",
        "regularizer_every_micro_step", "under_scaled_tail", "carried_tail",
        "schedule_per_micro_step", "ema_per_micro_step", "coupled_loss_summed",
    }
    source = inspect.getsource(gaviz.gallery.pitfalls)
    records = source[source.index("GALLERY = ("):].split("    Pitfall(\n")[1:]
    assert len(records) == len(PITFALLS)
    for record in records:  # each record labels its one change
        assert "# PITFALL:" in record, record[:60]
    for name, cls in PITFALLS.items():
        assert issubclass(cls, gaviz.AccumulationTrainer)
        assert cls.pitfall is gaviz.gallery.pitfalls.RECORDS[name]
        assert getattr(gaviz.gallery.pitfalls, cls.__name__) is cls
        doc = cls.__doc__
        for part in ("Symptom:", "Cause:", "Fix:", "Detect:"):
            assert part in doc, (cls.__name__, part)
    for function in (gaviz.gallery.pitfalls.mean_contribution, gaviz.gallery.pitfalls.keep_gradients,
                     gaviz.gallery.pitfalls.zero_weights, gaviz.gallery.pitfalls.full_window_divisor,
                     gaviz.gallery.pitfalls.average_each_micro_step):
        assert "# PITFALL:" in inspect.getsource(function)


def test_exact_against_itself_is_zero(equal_micro):
    result = compare("exact", equal_micro)
    assert result.first_update_relative_error == 0.0
    assert result.effective_learning_rate_ratio == pytest.approx(1.0)
    assert max(result.weight_distance) == 0.0


def test_missing_normalization_is_k_times_too_large(equal_micro):
    result = compare("missing_normalization", equal_micro)
    assert result.effective_learning_rate_ratio == pytest.approx(K, rel=1e-4)
    assert result.first_update_relative_error == pytest.approx(K - 1, rel=1e-4)
    assert result.loss[0] == pytest.approx(K * result.exact_loss[0], rel=1e-5)


def test_missing_reset_updates_grow_with_the_update_count(regression_data):
    x, y = regression_data
    same = [(x[:8], y[:8])] * (5 * K)  # one micro-batch, repeated: a near-constant gradient
    result = compare("missing_reset", same)
    growth = np.array(result.update_norms) / result.update_norms[0]
    np.testing.assert_allclose(growth, [1, 2, 3, 4, 5], rtol=0.02)
    exact_growth = np.array(result.exact_update_norms) / result.exact_update_norms[0]
    np.testing.assert_allclose(exact_growth, 1, rtol=0.02)


def test_dropped_tail_never_sees_the_tail(regression_data):
    x, y = regression_data
    sizes = [8] * 12 + [4]  # k=4: three full windows, then a tail of 4 samples
    y_changed = y.copy()
    y_changed[-4:] += 10.0
    weights = {}
    for name, cls in [("exact", gaviz.AccumulationTrainer), ("pitfall", PITFALLS["dropped_tail"])]:
        for label, targets in [("original", y), ("changed", y_changed)]:
            model = make_mlp()
            cls(model, sgd(), "mse", K).fit(dataset_of(micro_batches(x, targets, sizes)), epochs=2)
            weights[name, label] = flat(model)
    np.testing.assert_array_equal(weights["pitfall", "original"], weights["pitfall", "changed"])
    assert np.linalg.norm(weights["exact", "original"] - weights["exact", "changed"]) > 1e-3


def test_update_every_micro_step_applies_k_plus_one_times(regression_data):
    x, y = regression_data
    same = [(x[:8], y[:8])] * (3 * K)
    model = make_mlp()
    trainer = PITFALLS["update_every_micro_step"](model, sgd(), "mse", K)
    history = trainer.fit(dataset_of(same))
    assert len(history) == 3
    assert int(trainer.optimizer.iterations.numpy()) == 3 * (K + 1)
    result = compare("update_every_micro_step", same)
    assert result.effective_learning_rate_ratio == pytest.approx(K + 1, rel=0.01)
    exact = gaviz.AccumulationTrainer(make_mlp(), sgd(), "mse", K)
    exact.fit(dataset_of(same))
    assert int(exact.optimizer.iterations.numpy()) == 3


def test_zeroed_weights_wipes_the_model(equal_micro):
    model = make_mlp()
    PITFALLS["zeroed_weights"](model, sgd(), "mse", K).fit(dataset_of(equal_micro))
    assert not np.any(flat(model))
    exact = make_mlp()
    gaviz.AccumulationTrainer(exact, sgd(), "mse", K).fit(dataset_of(equal_micro))
    assert np.linalg.norm(flat(exact)) > 1.0


def mean_gradients(model, micro):
    """Each micro-batch's own mean-loss gradient at the model's current weights."""
    out = []
    for x, y in micro:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.mean_squared_error(y, model(x)))
        gradients = tape.gradient(loss, model.trainable_variables)
        out.append(np.concatenate([g.numpy().ravel() for g in gradients]))
    return out


def test_mean_of_means_is_exact_only_for_equal_micro_batches(equal_micro, ragged_micro):
    assert compare("mean_of_means", equal_micro).first_update_relative_error < 1e-4
    result = compare("mean_of_means", ragged_micro)
    assert result.first_update_relative_error > 0.05
    # The wrong number: the first update is lr times the average of the means.
    model = make_mlp()
    expected = -LR * np.mean(mean_gradients(model, ragged_micro[:K]), axis=0)
    before = flat(model)
    PITFALLS["mean_of_means"](model, sgd(), "mse", K).fit(dataset_of(ragged_micro[:K]))
    assert_step(flat(model) - before, expected)


def test_per_micro_batch_clipping_averages_clipped_gradients(ragged_micro):
    clip = 0.05
    model = make_mlp()
    grads = mean_gradients(model, ragged_micro[:K])
    assert min(np.linalg.norm(g) for g in grads) > clip  # every micro-batch gets clipped
    clipped = [g * clip / np.linalg.norm(g) for g in grads]
    sizes = np.array([len(m[0]) for m in ragged_micro[:K]], dtype=np.float64)
    expected = -LR * np.sum([s * g for s, g in zip(sizes, clipped)], axis=0) / sizes.sum()
    before = flat(model)
    PITFALLS["per_micro_batch_clipping"](model, sgd(global_clipnorm=clip), "mse", K).fit(
        dataset_of(ragged_micro[:K])
    )
    step = flat(model) - before
    assert_step(step, expected)
    assert np.linalg.norm(step) < LR * clip * 0.99
    exact = make_mlp()
    gaviz.AccumulationTrainer(exact, sgd(global_clipnorm=clip), "mse", K).fit(
        dataset_of(ragged_micro[:K])
    )
    assert np.linalg.norm(flat(exact) - before) == pytest.approx(LR * clip, rel=1e-3)


def test_per_micro_batch_clipping_needs_a_clipping_optimizer():
    with pytest.raises(ValueError, match="must clip"):
        PITFALLS["per_micro_batch_clipping"](make_mlp(), sgd(), "mse", K)


def test_regularizer_every_micro_step_counts_k_times(equal_micro):
    def regularized():
        return make_mlp(kernel_regularizer=keras.regularizers.L2(0.1))

    model = regularized()
    with tf.GradientTape() as tape:
        penalty = tf.add_n(model.losses)
    grads = tape.gradient(penalty, model.trainable_variables)
    reg_grad = np.concatenate([
        np.zeros(v.shape).ravel() if g is None else g.numpy().ravel()
        for g, v in zip(grads, model.trainable_variables)
    ])
    steps = {}
    for name in ("exact", "regularizer_every_micro_step"):
        m = regularized()
        cls = gaviz.AccumulationTrainer if name == "exact" else PITFALLS[name]
        before = flat(m)
        cls(m, sgd(), "mse", K).fit(dataset_of(equal_micro[:K]))
        steps[name] = flat(m) - before
    assert_step(steps["regularizer_every_micro_step"] - steps["exact"], -LR * (K - 1) * reg_grad)


def test_comparison_plot_and_summary(equal_micro):
    result = compare("missing_normalization", equal_micro)
    figure = result.plot()
    left, right = figure.axes
    np.testing.assert_allclose(left.get_lines()[1].get_ydata(), result.loss)
    np.testing.assert_allclose(right.get_lines()[0].get_ydata(), result.weight_distance)
    text = result.summary()
    assert text.startswith("missing_normalization against the exact trainer:") and "4.000" in text


def test_comparison_reports_a_diverging_pitfall(equal_micro):
    result = compare("missing_normalization", equal_micro * 5, optimizer=lambda: keras.optimizers.SGD(3.0))
    assert result.error and "non-finite" in result.error
    assert len(result.exact_loss) == 15
    # The updates before the failure are kept, and drawn.
    failed_at = result.failed_update
    assert len(result.loss) == failed_at - 1 > 0
    assert np.all(np.isfinite(result.loss))


def test_final_distance_sees_a_dropped_tail(regression_data):
    x, y = regression_data
    micro = micro_batches(x, y, [8] * 12 + [4])  # k=4: a 4-sample tail
    result = compare("dropped_tail", micro, optimizer=lambda: keras.optimizers.SGD(0.5))
    assert len(result.loss) == 3 and len(result.exact_loss) == 4
    # Paired by update number the first three updates agree exactly...
    assert max(result.weight_distance) == 0.0
    # ...but the runs end apart: the exact one applied the tail.
    assert result.final_weight_distance > 1e-3


def test_under_scaled_tail_shrinks_only_the_partial_window(regression_data):
    x, y = regression_data
    micro = micro_batches(x, y, [8] * 12 + [4])  # k=4: three full windows, a 1-micro-batch tail
    result = compare("under_scaled_tail", micro)
    ratios = np.array(result.update_norms) / np.array(result.exact_update_norms)
    np.testing.assert_allclose(ratios, [1, 1, 1, 1 / K], rtol=1e-4)


def test_carried_tail_straddles_the_epoch_boundary(regression_data):
    x, y = regression_data
    micro = micro_batches(x, y, [8] * 12 + [4])  # 13 micro-batches: 6 full windows in 2 epochs
    result = compare("carried_tail", micro, epochs=2)
    assert len(result.loss) == 6 and len(result.exact_loss) == 8
    assert max(result.weight_distance[:3]) == 0.0  # the first epoch's full windows agree
    assert result.weight_distance[3] > 1e-4  # the 4th window mixes both epochs


def test_schedule_per_micro_step_runs_the_schedule_k_times_too_fast(equal_micro):
    """With a rate halving every step, update 1 reads step k - 1 (0.5 ** (k - 1)
    of the exact rate) and update 2 step 2k - 1 (0.5 ** k of the exact step 1's)."""
    def halving():
        return keras.optimizers.SGD(
            keras.optimizers.schedules.ExponentialDecay(LR, decay_steps=1, decay_rate=0.5))

    steps = {}
    for name in ("exact", "schedule_per_micro_step"):
        model = make_mlp()
        cls = gaviz.AccumulationTrainer if name == "exact" else PITFALLS[name]
        trainer = cls(model, halving(), "mse", K)
        moves, before = [], flat(model)
        for window in (equal_micro[:K], equal_micro[K:2 * K]):
            trainer.fit(dataset_of(window))
            moves.append(flat(model) - before)
            before = flat(model)
        steps[name] = moves
    # The same weights before update 1: the same gradient, another rate.
    assert_step(steps["schedule_per_micro_step"][0], 0.5 ** (K - 1) * steps["exact"][0])
    assert int(trainer.optimizer.iterations.numpy()) == 2  # it still counts updates
    with pytest.raises(ValueError, match="must have a learning-rate schedule"):
        PITFALLS["schedule_per_micro_step"](make_mlp(), sgd(), "mse", K)


# ------------------------------------------------------------ the moving average

EMA_MOMENTUM, EMA_LR = 0.5, 0.1


def one_weight():
    return keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer="zeros")])


def steady_descent():
    """3 windows of K micro-batches of 8 samples x = 1, y = -100: under MAE every
    gradient is 1, so SGD(0.1) moves the weight by d = -0.1 per update: W_n = -0.1 n."""
    x, y = np.ones((3 * K * 8, 1), "float32"), np.full((3 * K * 8, 1), -100.0, "float32")
    return micro_batches(x, y, [8] * (3 * K))


def averaging_sgd(**kwargs):
    return keras.optimizers.SGD(EMA_LR, use_ema=True, ema_momentum=EMA_MOMENTUM, **kwargs)


def test_ema_per_micro_step_moves_the_average_k_times_per_update():
    """How far the moving average trails the weight after 3 updates, by hand.

    With momentum m, the average copies the weight at update 1 (Keras's momentum is
    0 while ``iterations == 0``): lag 0. Exact, one move per update:
    ``lag_n = m (lag_(n-1) + d)``, so ``lag_3 = m (1 + m) d = 0.075``. Once per
    micro-step, k - 1 moves towards the weight before the update, then the update's:
    ``lag_n = m^k lag_(n-1) + m d``, so ``lag_3 = m (1 + m^k) d = 0.053125``.
    """
    m, d = EMA_MOMENTUM, EMA_LR
    averages = {}
    for name in ("exact", "ema_per_micro_step"):
        model = one_weight()
        cls = gaviz.AccumulationTrainer if name == "exact" else PITFALLS[name]
        trainer = cls(model, averaging_sgd(), "mae", K)
        history = trainer.fit(dataset_of(steady_descent()), verbose=0)
        assert len(history) == 3
        averages[name] = float(flat(model)[0])  # fit copies the average into the model
    weight = -3 * d  # the weights themselves are the same in both runs
    assert averages["exact"] - weight == pytest.approx(m * (1 + m) * d, rel=1e-5)
    assert averages["ema_per_micro_step"] - weight == pytest.approx(m * (1 + m ** K) * d, rel=1e-5)
    # The number Keras's built-in gives, through Model.fit.
    model = one_weight()
    model.compile(optimizer=averaging_sgd(gradient_accumulation_steps=K), loss="mae")
    model.fit(dataset_of(steady_descent()), verbose=0, shuffle=False)
    assert float(flat(model)[0]) == pytest.approx(averages["ema_per_micro_step"], rel=1e-6)


def test_ema_per_micro_step_changes_only_the_average():
    result = gaviz.compare_with_exact(PITFALLS["ema_per_micro_step"], one_weight, averaging_sgd,
                                      "mae", dataset_of(steady_descent()), K)
    assert max(result.weight_distance) == 0.0  # every update is exact
    # The average fit leaves in the model: 0.075 - 0.053125 from the exact one's.
    assert result.final_weight_distance == pytest.approx(0.021875, rel=1e-4)
    assert result.headline == ("ema_per_micro_step: the moving average fit leaves in the model "
                               "is 0.022 from the exact one's after 3 updates")


def test_ema_per_micro_step_needs_a_moving_average():
    with pytest.raises(gaviz.gallery.pitfalls.OptimizerRefused, match=r"use_ema=True") as caught:
        PITFALLS["ema_per_micro_step"](one_weight(), sgd(), "mse", K)
    assert isinstance(caught.value, ValueError) and caught.value.needs == "use_ema=True"


class SquaredMeanResidual(keras.losses.Loss):
    """The square of the batch's mean residual: each row's value reads the batch's mean."""

    def call(self, y_true, y_pred):
        residual = (y_pred - y_true)[:, 0]
        return residual * keras.ops.mean(residual)


def test_coupled_loss_summed_moves_each_micro_batch_by_its_own_mean_over_the_windows():
    """One weight per micro-batch (micro-batch i reads input i alone): summed per
    micro-batch, weight i moves m_i / m of the exact move, m_i its rows' mean
    residual and m the window's."""
    k, b = 4, 3
    rng = np.random.default_rng(0)
    residuals = rng.uniform(0.5, 1.5, (k, b)).astype("float32")
    x = np.repeat(np.eye(k, dtype="float32"), b, axis=0)
    y = -residuals.reshape(-1, 1)  # the model starts at 0: its residuals are these

    def model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((k,)),
                                 keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])

    moves = {}
    for name, cls in (("exact", gaviz.AccumulationTrainer),
                      ("summed", PITFALLS["coupled_loss_summed"])):
        trained = model()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gaviz.CachedWindowUsed)
            cls(trained, keras.optimizers.SGD(0.1), SquaredMeanResidual(), k).fit(
                x, y, batch_size=b, shuffle=False, verbose=0)
        moves[name] = trained.get_weights()[0][:, 0]
    means = residuals.mean(axis=1)
    np.testing.assert_allclose(moves["summed"] / moves["exact"], means / means.mean(), rtol=1e-5)
    assert np.max(np.abs(means / means.mean() - 1)) > 0.05  # the data shows it
