"""More of Model.fit's arguments: class_weight, validation_split, validation_steps,
validation_batch_size, steps_per_epoch, and a PyDataset or a generator as x and as
validation_data.
Each run equals Model.fit(batch_size=K * B, shuffle=False) on the same data: the
weights and every history.history entry."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import PIPELINES, assert_same_history, assert_same_weights, clone, start_of, weight_gap

import gaviz

B, K, EPOCHS = 8, 4, 3  # Keras's batch: 32
ROWS = 100  # a partial last window each epoch


def classification(rows=ROWS, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype("float32")
    y = (x[:, :1] + 0.5 * x[:, 1:2] > 0.6).astype("float32")  # about 1 in 4 positive
    return x, y


def pair(loss="binary_crossentropy", metrics=("accuracy",)):
    """A compiled classifier, its trainer, and an identical compiled clone for Model.fit."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1, activation="sigmoid")])
    reference = clone(model)
    for m in (model, reference):
        m.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss, metrics=list(metrics))
    return model, gaviz.AccumulationTrainer(model, accumulation_steps=K), reference


def assert_same_run(ours, theirs, model, reference, start, terms=K * B):
    """The same history, and the same weights from ``start`` by the one rule (``terms``
    the rows of Model.fit's batch)."""
    assert_same_history(ours.history, theirs.history)
    assert_same_weights(model, reference, start, terms)


class Batches(keras.utils.PyDataset):
    """Arrays in batches of ``size``, in order."""

    def __init__(self, x, y, size):
        super().__init__()
        self.x, self.y, self.size = x, y, size

    def __len__(self):
        return -(-len(self.x) // self.size)

    def __getitem__(self, i):
        part = slice(i * self.size, (i + 1) * self.size)
        return self.x[part], self.y[part]


def batches(x, y, size):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(size)


def generator(x, y, size):
    for start in range(0, len(x), size):
        yield x[start:start + size], y[start:start + size]


X, Y = classification()
X_VAL, Y_VAL = classification(60, seed=1)
CLASS_WEIGHT = {0: 1.0, 1: 3.0}


def test_class_weight_on_arrays():
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(X, Y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0,
                       class_weight=CLASS_WEIGHT)
    theirs = reference.fit(X, Y, batch_size=K * B, epochs=EPOCHS, shuffle=False, verbose=0,
                           class_weight=CLASS_WEIGHT)
    assert_same_run(ours, theirs, model, reference, start)
    unweighted = pair()[1]
    unweighted.fit(X, Y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0)
    assert weight_gap(unweighted.model, model) > 1e-3  # the weights mattered


@pytest.mark.parametrize("road", PIPELINES)
def test_class_weight_on_a_dataset(road):
    """Sliced, the dataset is cut as arrays with the weights Keras maps onto its
    batches; iterated, the batches are mapped as Keras maps them."""
    model, trainer, reference = pair()
    start = start_of(model)
    dataset = PIPELINES[road](tf.data.Dataset.from_tensor_slices((X, Y)).batch(B))
    ours = trainer.fit(dataset, epochs=EPOCHS, verbose=0, class_weight=CLASS_WEIGHT)
    theirs = reference.fit(tf.data.Dataset.from_tensor_slices((X, Y)).batch(K * B),
                           epochs=EPOCHS, verbose=0, class_weight=CLASS_WEIGHT)
    assert_same_run(ours, theirs, model, reference, start)


def test_class_weight_with_sample_weight_is_refused_as_keras_does():
    _, trainer, _ = pair()
    with pytest.raises(ValueError, match="`class_weight` and `sample_weight`"):
        trainer.fit(X, Y, batch_size=B, sample_weight=np.ones(ROWS), class_weight=CLASS_WEIGHT)


@pytest.mark.parametrize("road", PIPELINES)
def test_class_weight_with_a_dataset_of_sample_weights_is_refused_as_keras_does(road):
    _, trainer, reference = pair()
    weighted = tf.data.Dataset.from_tensor_slices((X, Y, np.ones(ROWS, "float32"))).batch(B)
    for fit in (trainer.fit, reference.fit):
        with pytest.raises(ValueError, match="`class_weight` and `sample_weight`"):
            fit(PIPELINES[road](weighted), epochs=1, verbose=0, class_weight=CLASS_WEIGHT)


def test_validation_split_takes_the_last_rows():
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(X, Y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0,
                       validation_split=0.2)
    theirs = reference.fit(X, Y, batch_size=K * B, epochs=EPOCHS, shuffle=False, verbose=0,
                           validation_split=0.2)
    assert_same_run(ours, theirs, model, reference, start)


def test_validation_split_is_taken_before_shuffling():
    model, trainer, _ = pair()
    seen = trainer.fit(X, Y, batch_size=B, epochs=1, shuffle=True, verbose=0,
                       validation_split=0.2)
    last_rows = model.evaluate(X[80:], Y[80:], verbose=0, return_dict=True)
    assert seen.history["val_loss"][-1] == pytest.approx(last_rows["loss"], rel=1e-6)
    assert sum(u.samples for u in seen.updates) == 80


def test_validation_steps_and_batch_size():
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(X, Y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0,
                       validation_data=(X_VAL, Y_VAL), validation_steps=2,
                       validation_batch_size=16)
    theirs = reference.fit(X, Y, batch_size=K * B, epochs=EPOCHS, shuffle=False, verbose=0,
                           validation_data=(X_VAL, Y_VAL), validation_steps=2,
                           validation_batch_size=16)
    assert_same_run(ours, theirs, model, reference, start)
    # Two batches of 16 of the 60 validation rows: not the whole set.
    whole = reference.evaluate(X_VAL, Y_VAL, verbose=0, return_dict=True)
    assert abs(ours.history["val_loss"][-1] - whole["loss"]) > 1e-6


def test_a_py_dataset_as_x_and_as_validation_data():
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(Batches(X, Y, B), epochs=EPOCHS, shuffle=False, verbose=0,
                       validation_data=Batches(X_VAL, Y_VAL, 16))
    theirs = reference.fit(Batches(X, Y, K * B), epochs=EPOCHS, shuffle=False, verbose=0,
                           validation_data=Batches(X_VAL, Y_VAL, 16))
    assert_same_run(ours, theirs, model, reference, start)


def test_a_generator_as_x_and_as_validation_data():
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(generator(X, Y, B), epochs=1, verbose=0,
                       validation_data=generator(X_VAL, Y_VAL, 16), shuffle=False)
    theirs = reference.fit(generator(X, Y, K * B), epochs=1, verbose=0,
                           validation_data=generator(X_VAL, Y_VAL, 16), shuffle=False)
    assert_same_run(ours, theirs, model, reference, start)


# steps_per_epoch counts updates, as Keras's counts steps of its big batch; an
# epoch goes on where the last stopped, and ends early where a pass ends.


@pytest.mark.parametrize("steps", [3, 6])  # within a pass (4 updates) and beyond it
def test_steps_per_epoch_on_arrays(steps):
    model, trainer, reference = pair()
    start = start_of(model)
    with pytest.warns(UserWarning, match="ran out of data"):
        ours = trainer.fit(X, Y, batch_size=B, epochs=4, shuffle=False, verbose=0,
                           steps_per_epoch=steps)
    theirs = reference.fit(X, Y, batch_size=K * B, epochs=4, shuffle=False, verbose=0,
                           steps_per_epoch=steps)
    assert_same_run(ours, theirs, model, reference, start)
    assert ours.params["steps"] == theirs.params["steps"] == steps
    assert len(ours.updates) == int(reference.optimizer.iterations)


def test_steps_per_epoch_on_a_dataset_that_repeats():
    model, trainer, reference = pair()
    start = start_of(model)
    rows = 3 * K * B  # passes of whole windows, so both datasets repeat alike
    ours = trainer.fit(batches(X[:rows], Y[:rows], B).repeat(), epochs=3, verbose=0,
                       steps_per_epoch=2)
    theirs = reference.fit(batches(X[:rows], Y[:rows], K * B).repeat(), epochs=3, verbose=0,
                           steps_per_epoch=2)
    assert_same_run(ours, theirs, model, reference, start)
    assert len(ours.updates) == int(reference.optimizer.iterations) == 6


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_steps_per_epoch_goes_on_through_a_finite_dataset(pipeline):
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(PIPELINES[pipeline](batches(X, Y, B)), epochs=4, verbose=0,
                       steps_per_epoch=2)
    theirs = reference.fit(batches(X, Y, K * B), epochs=4, verbose=0, steps_per_epoch=2)
    assert_same_run(ours, theirs, model, reference, start)
    assert len(ours.updates) == int(reference.optimizer.iterations) == 8


def test_a_window_across_the_end_of_a_pass_is_warned_about():
    _, trainer, _ = pair()  # 100 rows: every 13th micro-batch is short
    with pytest.warns(UserWarning, match="held 28 rows, fewer than 4 x 8: `x` repeats forever"):
        trainer.fit(batches(X, Y, B).repeat(), epochs=1, verbose=0, steps_per_epoch=5)


def test_validation_freq_as_a_list_of_epochs():
    model, trainer, reference = pair()
    start = start_of(model)
    ours = trainer.fit(X, Y, batch_size=B, epochs=4, shuffle=False, verbose=0,
                       validation_data=(X_VAL, Y_VAL), validation_freq=[1, 3])
    theirs = reference.fit(X, Y, batch_size=K * B, epochs=4, shuffle=False, verbose=0,
                           validation_data=(X_VAL, Y_VAL), validation_freq=[1, 3])
    assert_same_run(ours, theirs, model, reference, start)
    assert len(ours.history["val_loss"]) == 2
    with pytest.raises(ValueError, match="`validation_freq` must be an integer >= 1"):
        trainer.fit(X, Y, batch_size=B, validation_data=(X_VAL, Y_VAL), validation_freq=[0])


def test_a_masked_loss_validates_in_model_fits_batches():
    """A masked mean depends on the batch: validation runs in batches of k * b by default."""
    rng = np.random.default_rng(5)
    tokens = np.zeros((60, 5), "int32")
    for row, length in enumerate(rng.integers(1, 6, 60)):
        tokens[row, :length] = rng.integers(1, 9, length)
    labels = tokens % 3

    def tagger():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((5,), dtype="int32")
        hidden = keras.layers.Embedding(9, 4, mask_zero=True)(inputs)
        model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
        return model

    model, reference = tagger(), tagger()
    start = start_of(model)
    ours = gaviz.AccumulationTrainer(model, accumulation_steps=K).fit(
        tokens[:47], labels[:47], batch_size=4, shuffle=False, verbose=0,
        validation_data=(tokens[47:], labels[47:]))
    theirs = reference.fit(tokens[:47], labels[:47], batch_size=K * 4, shuffle=False, verbose=0,
                           validation_data=(tokens[47:], labels[47:]))
    assert_same_run(ours, theirs, model, reference, start, terms=K * 4 * 5)  # rows x tokens


def test_per_output_entries_are_said_to_differ():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    model = keras.Model(inputs, {"a": keras.layers.Dense(1, name="a")(inputs),
                                 "b": keras.layers.Dense(1, name="b")(inputs)})
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss={"a": "mse", "b": "mse"})
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    with pytest.warns(UserWarning, match="per-output entries a_loss, b_loss"):
        trainer.fit(X, {"a": Y, "b": -Y}, batch_size=B, verbose=0)


def test_a_dataset_that_repeats_needs_steps_per_epoch():
    _, trainer, _ = pair()
    with pytest.raises(ValueError, match="`x` repeats forever.*pass `steps_per_epoch`"):
        trainer.fit(batches(X, Y, B).repeat(), epochs=1, verbose=0)
    with pytest.raises(ValueError, match="`steps_per_epoch` must be an integer >= 1"):
        trainer.fit(X, Y, batch_size=B, steps_per_epoch=0)


def test_batched_data_takes_no_y_and_the_split_needs_arrays():
    _, trainer, _ = pair()
    with pytest.raises(ValueError, match="`y` must be None when `x` is a PyDataset"):
        trainer.fit(Batches(X, Y, B), Y)
    with pytest.raises(ValueError, match="`validation_split` takes arrays apart"):
        trainer.fit(Batches(X, Y, B), validation_split=0.2)
    with pytest.raises(ValueError, match="`validation_split` must be a fraction"):
        trainer.fit(X, Y, batch_size=B, validation_split=1.5)
