"""The exercise solutions of lessons 01-03 do what their exercises ask.

Each is checked against an independent computation: plain integer arithmetic
for the batch sizes, and NumPy's closed-form gradient of a linear model's mean
squared error for the training step and the window arithmetic.
"""

import importlib
import itertools
import pathlib
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

batch_sizes = importlib.import_module("solutions.01_batch_sizes")
train_step_solution = importlib.import_module("solutions.02_train_step")
window_solution = importlib.import_module("solutions.03_window")


# ------------------------------------------------------------- 01 batch sizes


@pytest.mark.parametrize(
    "micro, k, replicas, expected",
    [(32, 1, 1, 32), (32, 8, 1, 256), (16, 16, 1, 256), (32, 8, 2, 512), (8, 4, 8, 256)],
)
def test_effective_batch_size_multiplies(micro, k, replicas, expected):
    assert batch_sizes.effective_batch_size(micro, k, replicas) == expected


def test_effective_batch_size_defaults_to_one_replica():
    assert batch_sizes.effective_batch_size(32, 4) == 128


def test_micro_batch_size_for_inverts_effective_batch_size():
    for micro, k, replicas in itertools.product([1, 3, 16, 32], [1, 2, 5, 8], [1, 2, 3]):
        effective = micro * k * replicas
        assert batch_sizes.micro_batch_size_for(effective, k, replicas) == micro


@pytest.mark.parametrize("effective, k, replicas", [(250, 4, 1), (256, 3, 1), (256, 8, 3), (7, 2, 1)])
def test_micro_batch_size_for_rejects_what_does_not_divide(effective, k, replicas):
    assert effective % (k * replicas) != 0
    with pytest.raises(ValueError):
        batch_sizes.micro_batch_size_for(effective, k, replicas)


@pytest.mark.parametrize("bad", [0, -4])
def test_batch_size_functions_reject_non_positive_sizes(bad):
    with pytest.raises(ValueError):
        batch_sizes.effective_batch_size(32, bad)
    with pytest.raises(ValueError):
        batch_sizes.micro_batch_size_for(256, bad)


# ------------------------------------------------------------ 02 train step


def linear_model(seed=3, features=4):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((features,)), keras.layers.Dense(1)])


def mse_gradient(kernel, bias, x, y):
    """Mean squared error of ``x @ kernel + bias`` and its gradient, in float64."""
    x, y = x.astype("float64"), y.astype("float64")
    residual = x @ kernel + bias - y
    n = residual.size
    return (residual**2).mean(), 2 * x.T @ residual / n, 2 * residual.sum(axis=0) / n


def linear_data(samples=10, features=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, features)).astype("float32")
    y = rng.normal(size=(samples, 1)).astype("float32")
    return x, y


def test_train_step_is_a_tf_function_returning_the_mean_loss_and_applying_sgd():
    x, y = linear_data()
    model = linear_model()
    kernel, bias = (w.astype("float64") for w in model.get_weights())
    learning_rate = 0.1
    step = train_step_solution.make_train_step(
        model, keras.optimizers.SGD(learning_rate), keras.losses.MeanSquaredError()
    )
    assert isinstance(step, tf.types.experimental.PolymorphicFunction)

    loss = step(tf.constant(x), tf.constant(y))

    expected_loss, grad_kernel, grad_bias = mse_gradient(kernel, bias, x, y)
    np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-5)
    new_kernel, new_bias = model.get_weights()
    np.testing.assert_allclose(new_kernel, kernel - learning_rate * grad_kernel, atol=1e-6)
    np.testing.assert_allclose(new_bias, bias - learning_rate * grad_bias, atol=1e-6)


def test_train_step_traces_once_for_same_shaped_batches_and_keeps_training():
    x, y = linear_data(samples=20)
    model = linear_model()
    step = train_step_solution.make_train_step(
        model, keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError()
    )
    losses = [float(step(tf.constant(x[i : i + 10]), tf.constant(y[i : i + 10]))) for i in (0, 10, 0)]
    assert step.experimental_get_tracing_count() == 1
    # The third call sees the first batch again, after two updates: a lower loss.
    assert losses[2] < losses[0]


# --------------------------------------------------------- 03 window arithmetic


def zeros_like_model(model):
    return [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]


def test_accumulate_adds_in_place_and_returns_the_accumulators():
    accumulators = [tf.Variable(tf.zeros((2, 3))), tf.Variable(tf.zeros((3,)))]
    first = [np.full((2, 3), 1.5, "float32"), np.arange(3, dtype="float32")]
    second = [np.full((2, 3), -0.5, "float32"), np.ones(3, "float32")]

    returned = window_solution.accumulate(accumulators, first)
    window_solution.accumulate(accumulators, second)

    assert returned is accumulators
    np.testing.assert_allclose(accumulators[0].numpy(), np.full((2, 3), 1.0))
    np.testing.assert_allclose(accumulators[1].numpy(), [1.0, 2.0, 3.0])


def test_accumulate_rejects_a_gradient_list_of_the_wrong_length():
    with pytest.raises(ValueError):
        window_solution.accumulate([tf.Variable(tf.zeros(2))], [])


def test_finish_window_divides_by_the_count_and_leaves_the_sums():
    accumulators = [tf.Variable([6.0, -3.0]), tf.Variable([[12.0]])]
    gradients = window_solution.finish_window(accumulators, 6)
    np.testing.assert_allclose(gradients[0].numpy(), [1.0, -0.5])
    np.testing.assert_allclose(gradients[1].numpy(), [[2.0]])
    # Resetting is its own piece (lesson 04): the sums are still there.
    np.testing.assert_allclose(accumulators[0].numpy(), [6.0, -3.0])
    np.testing.assert_allclose(accumulators[1].numpy(), [[12.0]])


def test_finish_window_of_an_empty_window_gives_zeros_not_nan():
    gradients = window_solution.finish_window([tf.Variable([0.0, 0.0])], 0)
    np.testing.assert_array_equal(gradients[0].numpy(), [0.0, 0.0])


def test_a_ragged_window_equals_the_big_batch_gradient():
    """Micro-batches of 3, 5 and 2 samples, summed then divided once: the mean over all 10."""
    x, y = linear_data(samples=10)
    model = linear_model()
    kernel, bias = (w.astype("float64") for w in model.get_weights())
    accumulators = zeros_like_model(model)
    mse = keras.losses.MeanSquaredError()
    count = 0
    for start, stop in [(0, 3), (3, 8), (8, 10)]:
        with tf.GradientTape() as tape:
            summed = tf.reduce_sum(mse.call(y[start:stop], model(x[start:stop])))
        window_solution.accumulate(accumulators, tape.gradient(summed, model.trainable_variables))
        count += stop - start

    grad_kernel, grad_bias = window_solution.finish_window(accumulators, count)

    _, expected_kernel, expected_bias = mse_gradient(kernel, bias, x, y)
    np.testing.assert_allclose(grad_kernel.numpy(), expected_kernel, atol=1e-6)
    np.testing.assert_allclose(grad_bias.numpy(), expected_bias, atol=1e-6)
