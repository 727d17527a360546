"""Every difference gaviz knows is named by verify, with its evidence, on a model
that shows it (each of these was "unexplained ... a bug of gaviz's" before its
probe: the tail the user chose, per-output logs, layers updating their own
variables, a coupled loss a rule sums, draws no probe can turn off); random
layers alone give "equal up to random draws"; "unexplained" comes last, after
every probe, and says what was tried."""

import math
import warnings

import keras
import numpy as np
import pytest
from test_coupled_loss import embedder, labelled

import gaviz
from gaviz.training.verify import report

K, B = 4, 16  # verified at micro-batches of 4, Model.fit at 16: windows of 16 rows, 38 rows


@pytest.fixture
def rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(60, 1))).astype("float32")


def mlp(*extra, seed=1):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                              *extra, keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model


def names(result):
    return [cause.name for cause in result.causes]


@pytest.mark.parametrize("tail", ["drop", "carry"])
def test_a_tail_the_user_chose_is_named_and_judged_against_model_fit_on_full_windows(rows, tail):
    result = gaviz.AccumulationTrainer(mlp(), accumulation_steps=K, tail=tail).verify(
        *rows, batch_size=B)
    assert result.kind == "different" and names(result) == ["the tail"], result
    (cause,) = result.causes
    assert cause.explains, result
    assert f'tail="{tail}": the epoch\'s last window (6 rows)' in cause.evidence
    assert "against Model.fit on the 32 rows of full windows alone, the weights, optimizer " \
           "state and loss are equal" in cause.evidence
    assert 'tail="flush" (the default) is Model.fit\'s' in cause.advice


def two_outputs():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    model = keras.Model(inputs, {"a": keras.layers.Dense(1, name="a")(hidden),
                                 "b": keras.layers.Dense(1, name="b")(hidden)})
    model.compile(keras.optimizers.Adam(0.01), loss={"a": "mse", "b": "mae"})
    return model


def test_two_outputs_are_judged_by_weights_optimizer_state_and_loss(rows):
    """Their per-output entries are averaged by rows, where Model.fit averages its
    batches (gaviz warns so): shown, not judged."""
    x, y = rows
    with pytest.warns(UserWarning, match="per-output entries a_loss, b_loss"):
        result = gaviz.AccumulationTrainer(two_outputs(), accumulation_steps=K).verify(
            x, {"a": y, "b": -y}, batch_size=B)
    assert result.equal and result.kind == "equal", result
    assert set(result.unjudged) == {"a_loss", "b_loss"}
    ours, theirs = result.logs["a_loss"]
    assert not math.isclose(ours, theirs, rel_tol=1e-3)  # the entry differs, by design
    assert "a_loss: gaviz" in str(result) and "(not judged: averaged over micro-batches" \
        in str(result)


class Counter(keras.layers.Layer):
    """Counts its training calls in a non-trainable variable."""

    def build(self, shape):
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                     name="calls")

    def call(self, x, training=False):
        if training:
            self.calls.assign_add(1.0)
        return x


def test_a_layer_updating_its_own_variable_is_named_as_the_first_fit_names_it(rows):
    result = gaviz.AccumulationTrainer(mlp(Counter(name="counter")), accumulation_steps=K
                                       ).verify(*rows, batch_size=B)
    assert names(result) == ["layers that update their own variables"], result
    (cause,) = result.causes
    assert cause.explains and "counter/calls changed in training: once per micro-batch here " \
        "(4 per update), once per batch under Model.fit; no other variable differs" \
        in cause.evidence, cause


def test_spectral_normalizations_power_iteration_is_named(rows):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.SpectralNormalization(
        keras.layers.Dense(8, activation="tanh"), name="spectral"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), loss="mse")
    result = gaviz.AccumulationTrainer(model, accumulation_steps=K).verify(*rows, batch_size=B)
    assert names(result) == ["layers that update their own variables"], result
    assert "spectral/vector_u changed in training" in result.causes[0].evidence
    assert "the weights they feed differ too" in result.causes[0].evidence


def test_random_layers_alone_are_a_verdict_of_their_own(rows):
    result = gaviz.AccumulationTrainer(mlp(keras.layers.Dropout(0.3, name="drop")),
                                       accumulation_steps=K).verify(*rows, batch_size=B)
    assert not result.equal and result.kind == report.RANDOM_DRAWS and result.trains
    assert result.causes[0].explains and names(result) == ["random layers"]
    assert result.verdict().startswith("Equal up to the random draws")


def test_random_layers_and_a_dropped_tail_each_named_the_tail_judged_with_them_off(rows):
    result = gaviz.AccumulationTrainer(mlp(keras.layers.Dropout(0.3, name="drop")),
                                       accumulation_steps=K, tail="drop").verify(
        *rows, batch_size=B)
    assert result.kind == "different" and names(result) == ["random layers", "the tail"]
    assert not result.causes[0].explains and result.causes[1].explains, result


def test_random_layers_that_are_not_the_whole_cause_leave_the_rest_unexplained(rows):
    result = gaviz.PITFALLS["missing_reset"](mlp(keras.layers.Dropout(0.3, name="drop")),
                                             accumulation_steps=K).verify(*rows, batch_size=B)
    assert result.kind == "different" and names(result) == ["random layers", "unexplained"]
    assert result.causes[1].evidence.startswith("beyond the causes above"), result


class OwnNoise(keras.layers.Layer):
    """Adds noise from a SeedGenerator of its own (no Keras layer verify can turn off)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(3)

    def call(self, x, training=False):
        return x + 0.1 * keras.random.normal(keras.ops.shape(x), seed=self.seed_generator) \
            if training else x


class GlobalNoise(keras.layers.Layer):
    """Adds noise drawn without a seed: from Keras's global SeedGenerator."""

    def call(self, x, training=False):
        return x + 0.1 * keras.random.normal(keras.ops.shape(x)) if training else x


def test_draws_no_probe_can_turn_off_are_named_by_the_generators_that_moved(rows):
    model = mlp(OwnNoise(name="own"), GlobalNoise())  # set_random_seed drops Keras's global one
    assert gaviz._keras.global_seed_generator() is None
    result = gaviz.AccumulationTrainer(model, accumulation_steps=K).verify(*rows, batch_size=B)
    assert result.kind == "different" and names(result) == ["random draws"], result
    assert "drew from own (its SeedGenerator), Keras's global" in result.causes[0].evidence
    assert gaviz._keras.global_seed_generator() is None  # the one the runs made, dropped


def test_a_coupled_loss_a_rule_sums_is_named():
    """The gallery's coupled_loss_summed (the exact trainer's cached window judged
    equal: tests/training/test_cached_window.py)."""
    x, y = labelled(rows=60)
    model = embedder(keras.losses.Circle(), optimizer=keras.optimizers.Adam(0.05))
    result = gaviz.PITFALLS["coupled_loss_summed"](model, accumulation_steps=3).verify(
        x, y, batch_size=6)
    assert names(result) == ["a coupled loss summed by micro-batch"], result
    assert "`loss` 'circle' couples the batch's rows" in result.causes[0].evidence


def test_unexplained_comes_after_every_probe_and_says_what_was_tried(rows):
    result = gaviz.PITFALLS["mean_of_means"](mlp(), accumulation_steps=K).verify(
        *rows, batch_size=B)
    assert names(result) == ["unexplained"]
    evidence = result.causes[0].evidence
    for tried in ("gaviz's warnings (none)", "a loss coupling rows, summed by micro-batch (none)",
                  "batch statistics (no such layer)", "layers updating their own variables "
                  "(none moved)", "random layers (none; other draws: none)",
                  "the tail (tail='flush')"):
        assert tried in evidence, evidence


def test_a_verifications_kind_is_one_of_three_and_says_whether_fit_trains(capsys):
    made = dict(accumulation_steps=2, micro_batch_size=1, rows=3, micro_batches=3, weights=[],
                optimizer=[], logs={})
    assert report.Verification(True, **made).kind == "equal"
    assert report.Verification(False, **made).kind == "different"
    assert [report.Verification(False, **made, kind=kind).trains for kind in report.KINDS] == [
        True, True, False]
    with pytest.raises(ValueError, match="`kind` must be one of"):
        report.Verification(False, **made, kind="close")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.required(report.Verification(False, **made, kind=report.RANDOM_DRAWS), 0)
    assert capsys.readouterr().out == ""
    report.required(report.Verification(False, **made, kind=report.RANDOM_DRAWS), 1)
    assert capsys.readouterr().out.startswith("Equal up to the random draws: gaviz is Model.fit")
    with pytest.raises(gaviz.NotExact):
        report.required(report.Verification(False, **made), 0)
