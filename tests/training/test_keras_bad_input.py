"""Issue 12: bad input to the Keras-style trainer is a clear error naming the argument,
and a carried window is never silently lost."""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_weights, make_mlp, start_of

import gaviz

B, K = 8, 4


def regression(rows, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(rows, 1))).astype("float32")


X, Y = regression(100)


def trainer_for(model=None, **kwargs):
    kwargs.setdefault("accumulation_steps", K)
    return gaviz.AccumulationTrainer(
        model or make_mlp(), keras.optimizers.SGD(0.1), "mse", **kwargs
    )


def test_arrays_without_y_are_refused():
    """fit(x) with arrays and no y: an error naming `y`."""
    with pytest.raises(ValueError, match="`y`"):
        trainer_for().fit(X, batch_size=B)


def test_batch_size_with_a_dataset_is_refused():
    """fit(dataset, batch_size=...): an error naming `batch_size` (the dataset is already batched)."""
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(B)
    with pytest.raises(ValueError, match="`batch_size`"):
        trainer_for().fit(dataset, batch_size=B)


def test_unbatched_dataset_hints_at_batch():
    """An unbatched dataset: an error naming the data argument and hinting `.batch(`."""
    dataset = tf.data.Dataset.from_tensor_slices((X, Y))
    trainer = trainer_for()
    with pytest.raises((ValueError, TypeError)) as caught:
        trainer.fit(dataset, epochs=1)
    message = str(caught.value)
    assert ".batch(" in message
    assert re.search(r"`(x|dataset)`", message), message
    assert int(trainer.optimizer.iterations.numpy()) == 0


def two_outputs():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(4, activation="tanh")(inputs)
    a = keras.layers.Dense(1, name="a")(hidden)
    b = keras.layers.Dense(2, name="b")(hidden)
    return keras.Model(inputs, {"a": a, "b": b})


Y_TWO = {"a": Y, "b": np.concatenate([Y, -Y], axis=1)}


@pytest.mark.parametrize(
    "loss, y, named",
    [
        ({"a": "mse", "c": "mae"}, Y_TWO, "loss"),  # a loss for an output that does not exist
        (["mse", "mae", "mse"], Y_TWO, "loss"),  # three losses for two outputs
        ({"a": "mse", "b": "mae"}, {"a": Y}, "y"),  # no targets for output "b"
    ],
    ids=["loss-key-not-an-output", "too-many-losses", "targets-missing-an-output"],
)
def test_structure_mismatch_is_refused(loss, y, named):
    """Outputs, losses and targets that do not match: an error naming the argument, before any update."""
    model = two_outputs()
    with pytest.raises((ValueError, TypeError)) as caught:
        trainer = gaviz.AccumulationTrainer(
            model, keras.optimizers.SGD(0.1), loss, accumulation_steps=K
        )
        try:
            trainer.fit(X, y, batch_size=B, epochs=1)
        finally:
            assert int(trainer.optimizer.iterations.numpy()) == 0
    assert f"`{named}`" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("tail", ["drop", "carry"])
def test_epoch_shorter_than_one_window_is_reported(tail):
    """tail "drop"/"carry" with fewer micro-batches per epoch than k: a warning or error naming both."""
    x, y = regression(40)  # 5 micro-batches of 8, k=8
    trainer = trainer_for(accumulation_steps=8, tail=tail)
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(x, y, batch_size=B, epochs=3, shuffle=False)
        except (ValueError, RuntimeError) as raised:
            error = raised
    messages = [str(error)] if error else [str(w.message) for w in caught]
    reported = [m for m in messages if "accumulation_steps" in m and re.search(r"\b5\b", m)]
    assert reported, f"no warning or error names accumulation_steps and 5 micro-batches: {messages}"


def test_no_optimizer_and_uncompiled_model_is_refused():
    """No optimizer (or no loss) and a model never compiled: an error naming `optimizer` (`loss`)."""
    with pytest.raises((ValueError, TypeError), match="`optimizer`"):
        gaviz.AccumulationTrainer(make_mlp(), loss="mse", accumulation_steps=K)
    with pytest.raises((ValueError, TypeError), match="`optimizer`"):
        gaviz.AccumulationTrainer(make_mlp(), accumulation_steps=K)
    with pytest.raises((ValueError, TypeError), match="`loss`"):
        gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(0.1), accumulation_steps=K)


@pytest.mark.parametrize("construction", ["explicit", "compiled"])
def test_none_reduction_is_refused(construction):
    """A loss with reduction="none" cannot be honoured: an error naming `loss` and its reduction."""
    loss = keras.losses.MeanSquaredError(reduction="none")
    model = make_mlp()
    with pytest.raises(ValueError) as caught:
        if construction == "explicit":
            trainer = gaviz.AccumulationTrainer(
                model, keras.optimizers.SGD(0.1), loss, accumulation_steps=K
            )
        else:
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
            trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
        trainer.fit(X, Y, batch_size=B, epochs=1)
    assert "`loss`" in str(caught.value) and "reduction" in str(caught.value)


def carrying_trainer(build=False):
    """A trainer with tail="carry" on a model with seeded initializers and, unless
    ``build``, no variables yet (no Input)."""

    def dense(units, **kwargs):
        return keras.layers.Dense(
            units, kernel_initializer=keras.initializers.GlorotUniform(seed=7), **kwargs
        )

    model = keras.Sequential([dense(8, activation="tanh"), dense(1)])
    if build:
        model.build((None, 5))
    assert model.built == build
    return gaviz.AccumulationTrainer(
        model, keras.optimizers.Adam(0.01), "mse", accumulation_steps=5, tail="carry"
    )


def test_carried_window_restored_into_an_unbuilt_model_is_not_lost(tmp_path):
    """A checkpointed carried window restored before the model is built: resumes exactly, or raises."""
    fit = dict(batch_size=B, shuffle=False)  # 13 micro-batches, k=5: 3 carried
    uninterrupted = carrying_trainer()
    uninterrupted.fit(X, Y, epochs=2, **fit)

    first = carrying_trainer()
    first.fit(X, Y, epochs=1, **fit)
    assert int(first.micro_steps_in_window.numpy()) == 3
    path = tf.train.Checkpoint(trainer=first).save(str(tmp_path / "ckpt"))

    # Weights and optimizer restored, the carried window lost: the second epoch
    # lands elsewhere, so the comparison below can fail.
    lost = carrying_trainer(build=True)
    if not lost.optimizer.built:
        lost.optimizer.build(lost.model.trainable_variables)
    parts = tf.train.Checkpoint(model=lost.model, optimizer=lost.optimizer)
    tf.train.Checkpoint(trainer=parts).read(path).expect_partial()
    assert int(lost.optimizer.iterations.numpy()) == 2
    lost.fit(X, Y, epochs=1, **fit)
    start = start_of(carrying_trainer(build=True).model)  # the seeded initial weights
    with pytest.raises(AssertionError, match="weights differ beyond float rounding"):
        assert_same_weights(lost.model, uninterrupted.model, start, terms=5 * B)

    resumed = carrying_trainer()
    try:
        tf.train.Checkpoint(trainer=resumed).restore(path)
        resumed.fit(X, Y, epochs=1, **fit)
    except (ValueError, RuntimeError) as error:  # refusing is allowed, if it says why
        assert re.search(r"build|carr|window", str(error)), str(error)
        return
    assert int(resumed.optimizer.iterations.numpy()) == int(
        uninterrupted.optimizer.iterations.numpy()
    )
    assert_same_weights(resumed.model, uninterrupted.model, start, terms=5 * B)


def text_model():
    """Strings in, through a TextVectorization layer with a fixed vocabulary."""
    keras.utils.set_random_seed(1)
    return keras.Sequential([
        keras.Input((), dtype="string"),
        keras.layers.TextVectorization(vocabulary=["a", "b", "c"], output_mode="multi_hot"),
        keras.layers.Dense(1),
    ])


TEXT = np.array(["a b", "c", "a c", "b b"] * 4)  # numpy str_ (<U3): Model.fit refuses it
TEXT_Y = np.ones((16, 1), "float32")


@pytest.mark.parametrize("fit, named", [
    (dict(x=TEXT, y=TEXT_Y), r"`x` .* Received: x of dtype <U3 and shape \(16,\)"),
    (dict(x={"text": TEXT.astype("S")}, y=TEXT_Y), r"`x\['text'\]` .* dtype \|S3"),
    (dict(x=TEXT.reshape(16, 1).astype(object), y=TEXT_Y), r"`x` .* dtype object"),
    (dict(x=TEXT.astype(object), y=TEXT_Y, validation_data=(TEXT, TEXT_Y)),
     r"`validation_data\[0\]` .* dtype <U3"),
], ids=["str", "bytes-in-a-dict", "2d-object", "str-validation"])
def test_arrays_model_fit_refuses_are_refused_before_training(fit, named):
    """Numpy str_ or bytes_ arrays, or object arrays other than a 1-D array of
    str, which Model.fit refuses: an error naming the argument, with no update."""
    trainer = trainer_for(text_model(), accumulation_steps=2)
    with pytest.raises(ValueError, match=named) as caught:
        trainer.fit(batch_size=4, epochs=1, verbose=0, **fit)
    assert "must be an array of numbers, booleans or strings" in str(caught.value)
    assert int(trainer.optimizer.iterations.numpy()) == 0


class SummedLoss(keras.layers.Layer):
    """Adds a loss that sums over the batch's rows: 1/k of Model.fit's per micro-batch."""

    def call(self, x):
        self.add_loss(keras.ops.sum(keras.ops.square(x)))
        return x


class NoLoss(keras.layers.Layer):
    def call(self, x):
        return x


def added_loss_model(layer):
    """Compiled without a loss: whatever ``layer`` adds is the loss."""
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    model = keras.Model(inputs, layer(keras.layers.Dense(2)(inputs)))
    model.compile(keras.optimizers.SGD(0.1))
    return model


@pytest.mark.parametrize("layer, named", [
    (SummedLoss, r"`model` is compiled without a loss, and the loss its layers add with "
                 r"add_loss \(summed_loss\) is not a mean over the batch's rows"),
    (NoLoss, r"`loss` is required: .* or add it in a layer's call with add_loss\. "
             r"Received: loss=None, .* no loss added with add_loss"),
], ids=["summed-over-rows", "none"])
def test_a_loss_added_with_add_loss_that_is_not_a_mean_over_rows_is_refused(layer, named):
    """A model whose only loss is what its layers add: refused by name, with no
    update, when it adds none or one Model.fit would weigh otherwise."""
    trainer = gaviz.AccumulationTrainer(added_loss_model(layer()), accumulation_steps=K)
    with pytest.raises(ValueError, match=named):
        trainer.fit(X, batch_size=B, epochs=1, verbose=0)  # inputs alone, as Model.fit takes
    assert int(trainer.optimizer.iterations.numpy()) == 0
