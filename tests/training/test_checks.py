"""Every bad argument gets a clear error naming it."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import make_mlp

import gaviz


def trainer(**overrides):
    kwargs = dict(
        model=make_mlp(),
        optimizer=keras.optimizers.SGD(0.1),
        loss="mse",
        accumulation_steps=2,
    )
    kwargs.update(overrides)
    return gaviz.AccumulationTrainer(**kwargs)


@pytest.mark.parametrize("steps", [0, -3, 2.0, "4", True, False, None])
def test_accumulation_steps_must_be_a_positive_int(steps):
    with pytest.raises(ValueError, match=r"`accumulation_steps` must be an integer >= 1\. "
                       r"Received: accumulation_steps="):
        trainer(accumulation_steps=steps)


def test_numpy_integer_steps_are_accepted():
    assert trainer(accumulation_steps=np.int64(3)).accumulation_steps == 3


def test_unknown_tail():
    with pytest.raises(ValueError, match=r"`tail` must be one of .*Received: tail='keep'"):
        trainer(tail="keep")


def test_model_must_be_keras():
    with pytest.raises(TypeError, match="`model` must be a keras.Model"):
        trainer(model=lambda x: x)


def test_optimizer_must_not_accumulate_itself():
    with pytest.raises(ValueError, match="gradient_accumulation_steps=4"):
        trainer(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=4))


def test_optimizer_must_be_keras():
    with pytest.raises(TypeError, match="`optimizer` must be"):
        trainer(optimizer="sgd")


def test_unknown_loss_name():
    with pytest.raises(ValueError, match="`loss` must be .*not_a_loss"):
        trainer(loss="not_a_loss")


def test_loss_must_be_callable():
    with pytest.raises(TypeError, match="`loss` must be"):
        trainer(loss=3)


def data(n=20, targets=1):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 5)).astype("float32")
    y = rng.normal(size=(n, targets)).astype("float32")
    return x, y


def test_dataset_must_be_a_tf_dataset():
    with pytest.raises(TypeError, match="`x` must be a tf.data.Dataset.*Received: a tuple"):
        trainer().fit(data())


def test_empty_dataset():
    x, y = data()
    with pytest.raises(ValueError, match="`x` is empty"):
        trainer().fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4).take(0))


@pytest.mark.parametrize("epochs", [-1, 1.5, True])
def test_epochs_must_be_a_count(epochs):
    x, y = data()
    with pytest.raises(ValueError, match=r"`epochs` must be an integer >= 0"):
        trainer().fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4), epochs=epochs)


def test_zero_epochs_train_nothing_as_in_keras():
    x, y = data()
    fitted = trainer()
    before = [w.copy() for w in fitted.model.get_weights()]
    history = fitted.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4), epochs=0)
    assert history.history == {} and history.epoch == [] and len(history) == 0
    assert all((a == b).all() for a, b in zip(before, fitted.model.get_weights()))


def test_elements_must_be_x_y_tuples():
    x, _ = data()
    with pytest.raises(TypeError, match=r"elements must be tuples \(x, y\)"):
        trainer().fit(tf.data.Dataset.from_tensor_slices(x).batch(4))
    with pytest.raises(TypeError, match=r"elements must be tuples"):
        trainer().fit(tf.data.Dataset.from_tensor_slices((x, x, x, x)).batch(4))


def test_targets_that_do_not_fit_the_outputs():
    x, y = data(targets=3)  # model has one output; MSE would broadcast silently
    with pytest.raises(ValueError, match=r"different shapes.*\(4, 3\).*\(4, 1\)"):
        trainer().fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))


def test_targets_with_another_batch_size():
    x, y = data()
    ds = tf.data.Dataset.from_tensors((x[:4], y[:3]))
    with pytest.raises(ValueError, match="different batch sizes"):
        trainer().fit(ds)


def test_loss_that_reduces_to_a_scalar():
    """A scalar loss trains with the cached window (tests/training/test_cached_window.py),
    or, with cached_window=False, is refused by name."""
    x, y = data()
    mean_loss = lambda y_true, y_pred: tf.reduce_mean(tf.square(y_true - y_pred))  # noqa: E731
    with pytest.raises(ValueError, match="returned a scalar"):
        trainer(loss=mean_loss, cached_window=False).fit(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(4))


def test_loss_that_fails_on_the_targets():
    x, _ = data()
    y = np.zeros((20, 2, 7), "float32")
    with pytest.raises(ValueError, match=r"`loss` failed on the first micro-batch"):
        trainer(loss="mse").fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))


def test_dataset_that_runs_dry_in_a_later_epoch():
    x, y = data()
    calls = []

    def batches():
        calls.append(1)
        if len(calls) <= 2:  # the trainer's first look, then epoch 1
            yield from ((x[i : i + 4], y[i : i + 4]) for i in range(0, 20, 4))

    ds = tf.data.Dataset.from_generator(
        batches, output_signature=(tf.TensorSpec((None, 5)), tf.TensorSpec((None, 1)))
    )
    with pytest.raises(ValueError, match="no micro-batches in epoch 2"):
        trainer().fit(ds, epochs=2)


def test_bad_callback():
    x, y = data()
    with pytest.raises(TypeError, match="`on_update`"):
        trainer().fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4), on_update=[1])
