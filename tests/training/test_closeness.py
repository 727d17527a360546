"""The one rule for "equal" (gaviz.training.verify.closeness): rounding passes, on any
CPU's kernels; a defect's gap does not, even on a variable that barely moved."""

import keras
import numpy as np
import pytest
from helpers import assert_same_weights, make_mlp, start_of

import gaviz
from gaviz.training.verify.closeness import ULPS, allowed_gap, variable_gaps

EPS = float(np.finfo("float32").eps)


def test_rounding_of_the_summed_terms_is_equal_and_one_percent_of_the_movement_is_not():
    start = np.zeros(4, "float32")
    expected = np.full(4, 0.5, "float32")
    rounding = expected + np.float32(64 * EPS * 0.5)  # 64 ulps: a sum of 20 terms reordered
    (gap,) = variable_gaps([rounding], [expected], [start], terms=20)
    assert gap.equal and gap.relative < 1e-5
    (gap,) = variable_gaps([expected * 1.01], [expected], [start], terms=20)
    assert not gap.equal and gap.relative == pytest.approx(0.01, rel=1e-6)


def test_the_bound_grows_with_the_terms_summed_and_with_the_movement():
    assert allowed_gap(0.1, 0.0, terms=400) == pytest.approx(20 * allowed_gap(0.1, 0.0, terms=1))
    assert allowed_gap(0.2, 0.0, terms=20) == pytest.approx(2 * allowed_gap(0.1, 0.0, terms=20))


def test_a_variable_that_did_not_move_may_differ_by_its_own_rounding_only():
    start = expected = np.array([3.0], "float32")
    few_ulps = np.nextafter(expected, np.float32(4.0))
    assert variable_gaps([few_ulps], [expected], [start], terms=8)[0].equal
    off = expected + np.float32(2 * ULPS * EPS * 3.0)
    assert not variable_gaps([off], [expected], [start], terms=8)[0].equal


def test_integer_variables_must_be_equal():
    (gap,) = variable_gaps([np.array(5)], [np.array(6)], [np.array(0)], terms=100)
    assert not gap.equal and gap.allowed == 0


def test_the_worst_variable_comes_first_and_bad_input_is_named():
    start = [np.zeros(2, "float32")] * 2
    gaps = variable_gaps([np.ones(2), np.full(2, 1.1)], [np.ones(2)] * 2, start, terms=4,
                         names=["a", "b"])
    assert [g.name for g in gaps] == ["b", "a"]
    with pytest.raises(ValueError, match="`terms` must be an integer >= 1. Received: terms=0"):
        allowed_gap(1.0, 1.0, terms=0)
    with pytest.raises(ValueError, match="same variables"):
        variable_gaps([np.ones(1)], [], [], terms=1)


def _train(trainer_class, x, y, k):
    model = make_mlp(seed=4)
    start = start_of(model)
    model.compile(keras.optimizers.Adam(0.01), loss="mse")
    trainer_class(model, accumulation_steps=k).fit(x, y, batch_size=3, epochs=2, shuffle=False,
                                                   verbose=0)
    return model, start


def test_the_rule_accepts_the_trainer_and_refuses_a_window_of_micro_batch_means():
    """The same Adam run, exact and with one defect (each micro-batch's mean
    summed and divided by k, Keras's built-in): the rule tells them apart,
    though the defect touches only the ragged last window of each epoch."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(22, 5)).astype("float32")
    y = rng.normal(size=(22, 1)).astype("float32")
    reference = make_mlp(seed=4)
    reference.compile(keras.optimizers.Adam(0.01), loss="mse")
    reference.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    exact, start = _train(gaviz.AccumulationTrainer, x, y, k=4)
    assert_same_weights(exact, reference, start, terms=12)
    wrong, _ = _train(gaviz.PITFALLS["mean_of_means"], x, y, k=4)
    with pytest.raises(AssertionError, match="weights differ beyond float rounding"):
        assert_same_weights(wrong, reference, start, terms=12)
