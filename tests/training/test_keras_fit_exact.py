"""Issue 12: ``fit`` and ``evaluate`` speak Keras, and their numbers are Keras's own.

Every test trains a model with the trainer (micro-batches of ``B``, windows of
``K``) and an identical clone with ``Model.fit(batch_size=K * B, shuffle=False)``
from the same initial weights and optimizer configuration, then compares the
weights and every per-epoch value of ``history.history``.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    PIPELINES,
    assert_same_history,
    assert_same_weights,
    clone,
    make_mlp,
    make_tagger,
    padded_tokens,
    same_optimizer,
    start_of,
    weight_gap,
)
from reference import group_windows, micro_batches, train_big_batches

import gaviz

B, K = 8, 4  # micro-batch size and accumulation steps: Keras's batch is K * B = 32
EPOCHS = 3
OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "adam": lambda: keras.optimizers.Adam(0.01),
}


def regression(rows, seed=0, outputs=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype("float32")
    y = (np.sin(x[:, :outputs]) + 0.1 * rng.normal(size=(rows, outputs))).astype("float32")
    return x, y


def keras_fit(model, x, y, epochs=EPOCHS, **kwargs):
    """Keras's own training on the big batch: the reference."""
    return model.fit(x, y, batch_size=K * B, epochs=epochs, shuffle=False, verbose=0, **kwargs)


def assert_update_losses_average_to_epoch_loss(history):
    """``history.loss`` (per update) averaged by window size is ``history.history["loss"]``."""
    losses = np.asarray(history.loss)
    sizes = np.asarray(history.samples, dtype="float64")
    epochs = np.asarray(history.update_epochs)
    per_epoch = [
        np.sum(losses[epochs == e] * sizes[epochs == e]) / np.sum(sizes[epochs == e])
        for e in sorted(set(history.update_epochs))
    ]
    np.testing.assert_allclose(per_epoch, history.history["loss"], rtol=1e-5)


@pytest.mark.parametrize(
    "optimizer, rows",
    [("sgd", 100), ("adam", 100)],  # 100 rows: windows of 32, 32, 32 and 4 samples
    ids=["sgd", "adam"],
)
def test_compiled_model_fit_matches_keras_fit(optimizer, rows):
    """A trainer made from a compiled model: weights and history.history equal Model.fit's."""
    x, y = regression(rows)
    x_val, y_val = regression(40, seed=1)
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    model.compile(optimizer=OPTIMIZERS[optimizer](), loss="mse", metrics=["mae"])
    reference.compile(optimizer=OPTIMIZERS[optimizer](), loss="mse", metrics=["mae"])

    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    assert trainer.optimizer is model.optimizer
    history = trainer.fit(
        x, y, batch_size=B, epochs=EPOCHS, shuffle=False, validation_data=(x_val, y_val), verbose=0
    )
    expected = keras_fit(reference, x, y, validation_data=(x_val, y_val))

    assert model.optimizer is trainer.optimizer
    assert_same_weights(model, reference, start, terms=K * B)
    assert weight_gap(model, make_mlp()) > 1e-2  # both trained: not two no-ops
    assert set(history.history) == {"loss", "mae", "val_loss", "val_mae"}
    assert_same_history(history.history, expected.history)
    updates = EPOCHS * -(-rows // (K * B))
    assert len(history.loss) == updates == int(trainer.optimizer.iterations.numpy())
    assert int(reference.optimizer.iterations.numpy()) == updates
    assert_update_losses_average_to_epoch_loss(history)


def test_explicit_arguments_match_keras_fit():
    """AccumulationTrainer(model, optimizer, loss, metrics=...) on an uncompiled model equals Model.fit."""
    x, y = regression(96)  # full windows only
    x_val, y_val = regression(40, seed=1)
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    optimizer = keras.optimizers.Adam(0.01)
    reference.compile(optimizer=same_optimizer(optimizer), loss="mse", metrics=["mae"])

    trainer = gaviz.AccumulationTrainer(
        model, optimizer, "mse", accumulation_steps=K, metrics=["mae"]
    )
    assert model.optimizer is optimizer and trainer.optimizer is optimizer
    history = trainer.fit(
        x, y, batch_size=B, epochs=EPOCHS, shuffle=False, validation_data=(x_val, y_val), verbose=0
    )
    expected = keras_fit(reference, x, y, validation_data=(x_val, y_val))

    assert model.optimizer is optimizer
    assert_same_weights(model, reference, start, terms=K * B)
    assert_same_history(history.history, expected.history)


def compiled_mlps():
    """A compiled MLP (SGD, mse, mae) and an identical compiled clone for Model.fit."""
    model = make_mlp()
    reference = clone(model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    return model, reference


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_dataset_of_micro_batches_matches_keras_fit(pipeline):
    """fit(tf.data.Dataset of (x, y) micro-batches) gives Model.fit's weights and history."""
    x, y = regression(100)
    x_val, y_val = regression(40, seed=1)
    model, reference = compiled_mlps()
    start = start_of(model)

    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    dataset = PIPELINES[pipeline](tf.data.Dataset.from_tensor_slices((x, y)).batch(B))
    history = trainer.fit(dataset, epochs=EPOCHS, validation_data=(x_val, y_val), verbose=0)
    expected = keras_fit(reference, x, y, validation_data=(x_val, y_val))

    assert_same_weights(model, reference, start, terms=K * B)
    assert_same_history(history.history, expected.history)
    assert len(history.loss) == EPOCHS * 4


def test_sample_weight_matches_keras_fit():
    """sample_weight arrays weigh the loss (and the metrics) as in Model.fit."""
    x, y = regression(100)
    w = np.random.default_rng(3).uniform(0.0, 2.0, size=(100,)).astype("float32")
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    reference.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])

    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    history = trainer.fit(
        x, y, batch_size=B, epochs=EPOCHS, shuffle=False, sample_weight=w, verbose=0
    )
    expected = keras_fit(reference, x, y, sample_weight=w)

    assert_same_weights(model, reference, start, terms=K * B)
    assert_same_history(history.history, expected.history)
    # The weights matter here: unweighted training lands elsewhere.
    unweighted = clone(make_mlp())
    unweighted.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    keras_fit(unweighted, x, y)
    assert weight_gap(unweighted, reference) > 1e-3


def test_classifier_accuracy_matches_keras_fit():
    """metrics=["accuracy"] with sparse categorical crossentropy: Keras's accuracy, per epoch."""
    x, _ = regression(100)
    labels = np.argmax(x[:, :3] + 0.3 * x[:, 3:4], axis=1).astype("int32")
    x_val, _ = regression(40, seed=1)
    labels_val = np.argmax(x_val[:, :3] + 0.3 * x_val[:, 3:4], axis=1).astype("int32")
    model = make_mlp(outputs=3)
    reference, start = clone(model), start_of(model)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss=loss, metrics=["accuracy"])
    reference.compile(optimizer=keras.optimizers.Adam(0.02), loss=loss, metrics=["accuracy"])

    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    history = trainer.fit(
        x, labels, batch_size=B, epochs=EPOCHS, shuffle=False,
        validation_data=(x_val, labels_val), verbose=0,
    )
    expected = keras_fit(reference, x, labels, validation_data=(x_val, labels_val))

    assert_same_weights(model, reference, start, terms=K * B)
    assert set(expected.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert_same_history(history.history, expected.history)


def _masked_case(model, loss, tokens, labels, epochs=2):
    """Trains ``model`` with the trainer and a clone with Model.fit; returns both histories."""
    reference = clone(model)
    naive = clone(model)
    # SGD: with Adam, Keras squares each occurrence of a token's embedding
    # gradient separately (IndexedSlices are not summed first), gaviz the
    # summed gradient, as TensorFlow's Adam does (README, "on purpose").
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    reference.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    history = trainer.fit(tokens, labels, batch_size=B, epochs=epochs, shuffle=False, verbose=0)
    expected = keras_fit(reference, tokens, labels, epochs=epochs)
    # Every token counted (padding included): what ignoring the mask gives. The
    # data must make it differ from Keras, or the comparison proves nothing.
    sizes = [B] * (len(tokens) // B) + ([len(tokens) % B] if len(tokens) % B else [])
    windows = group_windows(micro_batches(tokens, labels, sizes), K, "flush", epochs)
    per_token = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    train_big_batches(naive, keras.optimizers.SGD(0.5), per_token, windows)
    assert weight_gap(naive, reference) > 1e-3
    return history, expected, reference


def test_embedding_mask_matches_keras_fit():
    """Embedding(mask_zero=True), no sample_weight: normalized by the window's real tokens, as Model.fit."""
    tokens, labels = padded_tokens(100)
    assert 0.3 < np.mean(tokens == 0) < 0.6
    model = make_tagger(mask_zero=True)
    start = start_of(model)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    history, expected, reference = _masked_case(model, loss, tokens, labels)

    assert_same_weights(model, reference, start, terms=K * B * tokens.shape[1])  # rows x tokens
    assert_same_history(history.history, expected.history)


def test_ignore_class_matches_keras_fit():
    """SparseCategoricalCrossentropy(ignore_class=0): normalized by the window's kept labels, as Model.fit."""
    tokens, labels = padded_tokens(100)
    model = make_tagger(mask_zero=False)
    start = start_of(model)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    history, expected, reference = _masked_case(model, loss, tokens, labels)

    assert_same_weights(model, reference, start, terms=K * B * tokens.shape[1])  # rows x tokens
    assert_same_history(history.history, expected.history)


def test_sum_reduction_is_honoured():
    """A loss object with reduction="sum" trains on the window's summed loss, as Model.fit."""
    x, y = regression(100)
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    loss = keras.losses.MeanSquaredError(reduction="sum")
    model.compile(optimizer=keras.optimizers.SGD(0.003), loss=loss, metrics=["mae"])
    reference.compile(optimizer=keras.optimizers.SGD(0.003), loss=loss, metrics=["mae"])

    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    history = trainer.fit(x, y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0)
    expected = keras_fit(reference, x, y)

    assert_same_weights(model, reference, start, terms=K * B)
    assert_same_history(history.history, expected.history)
    # Keras's epoch loss is the mean of batch sums: far above a per-sample mean.
    assert expected.history["loss"][0] > 5 * expected.history["mae"][0] ** 2


def two_outputs(form):
    """A functional model with outputs named "a" (1 unit) and "b" (2 units)."""
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(6, activation="tanh")(inputs)
    a = keras.layers.Dense(1, name="a")(hidden)
    b = keras.layers.Dense(2, name="b")(hidden)
    return keras.Model(inputs, {"a": a, "b": b} if form == "dict" else [a, b])


@pytest.mark.parametrize("form", ["dict", "list"])
def test_two_outputs_with_loss_weights_match_keras_fit(form):
    """Two outputs, a loss and a loss weight each (dict or list form): Model.fit's weights and history."""
    # 96 rows: full windows only. On a partial last batch Keras averages its
    # per-output losses ("a_loss") over batches without weighting them by size
    # (unlike "loss"), a Keras quirk this test does not pin.
    x, _ = regression(96)
    rng = np.random.default_rng(5)
    y_a = np.sin(x[:, :1]).astype("float32")
    y_b = rng.normal(size=(96, 2)).astype("float32")
    x_val, _ = regression(32, seed=1)
    y_val_a, y_val_b = np.sin(x_val[:, :1]).astype("float32"), y_b[:32] * 0.5
    if form == "dict":
        loss, loss_weights = {"a": "mse", "b": "mae"}, {"a": 1.0, "b": 0.5}
        y, y_val = {"a": y_a, "b": y_b}, {"a": y_val_a, "b": y_val_b}
    else:
        loss, loss_weights = ["mse", "mae"], [1.0, 0.5]
        y, y_val = [y_a, y_b], [y_val_a, y_val_b]
    model = two_outputs(form)
    reference, start = clone(model), start_of(model)
    reference.compile(keras.optimizers.Adam(0.02), loss=loss, loss_weights=loss_weights)
    if form == "dict":  # the explicit constructor
        trainer = gaviz.AccumulationTrainer(
            model, keras.optimizers.Adam(0.02), loss, accumulation_steps=K,
            loss_weights=loss_weights,
        )
    else:  # from compile
        model.compile(keras.optimizers.Adam(0.02), loss=loss, loss_weights=loss_weights)
        trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    history = trainer.fit(
        x, y, batch_size=B, epochs=EPOCHS, shuffle=False, validation_data=(x_val, y_val), verbose=0
    )
    expected = keras_fit(reference, x, y, validation_data=(x_val, y_val))

    assert_same_weights(model, reference, start, terms=K * B)
    assert weight_gap(model, two_outputs(form)) > 1e-2
    assert {"loss", "a_loss", "b_loss", "val_loss"} <= set(expected.history)
    assert_same_history(history.history, expected.history)


def test_evaluate_matches_keras_evaluate():
    """trainer.evaluate equals Model.evaluate: a dict, a list in Keras's order, a scalar for loss only."""
    x, y = regression(100, seed=2)
    model, reference = compiled_mlps()
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)

    got = trainer.evaluate(x, y, batch_size=64, return_dict=True)
    expected = reference.evaluate(x, y, batch_size=64, return_dict=True, verbose=0)
    assert isinstance(got, dict)
    assert_same_history({k: [v] for k, v in got.items()}, {k: [v] for k, v in expected.items()})

    got_list = trainer.evaluate(x, y, batch_size=64, return_dict=False)
    expected_list = reference.evaluate(x, y, batch_size=64, verbose=0)
    assert isinstance(got_list, list) and len(got_list) == len(expected_list) == 2
    np.testing.assert_allclose(got_list, expected_list, rtol=1e-5)

    # Only a loss: a number, as Keras returns.
    plain = gaviz.AccumulationTrainer(clone(make_mlp()), keras.optimizers.SGD(0.1), "mse",
                                      accumulation_steps=K)
    loss_only = plain.evaluate(x, y, batch_size=64)
    assert np.ndim(loss_only) == 0
    np.testing.assert_allclose(float(loss_only), expected["loss"], rtol=1e-5)
