"""One micro-batch's forward and backward pass (gaviz.training.loop.forward_backward), as sums:
compared with the same quantities computed by hand on a plain tape."""

import keras
import numpy as np
import tensorflow as tf
from helpers import make_mlp

from gaviz.training.loop.forward_backward import ForwardBackward, unpack
from gaviz.training.loss.objective import Objective


def prepared(model, x, y, loss="mse", metrics=None):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=metrics)
    objective = Objective(model._compile_loss, None)
    objective.build(tf.constant(y), model(x))
    model._symbolic_build(data_batch=(x, y))
    return ForwardBackward(model, model.optimizer, objective)


def by_hand(model, x, y, w=None, extra=lambda: 0.0):
    """The summed weighted squared error and its gradients, on a plain tape."""
    with tf.GradientTape() as tape:
        per_sample = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
        weighted = per_sample if w is None else per_sample * w
        total = tf.reduce_sum(weighted) + extra()
    return float(total), [g.numpy() for g in tape.gradient(total, model.trainable_variables)]


def test_a_micro_batch_adds_its_summed_loss_gradient_and_count(regression_data):
    x, y = (a[:6] for a in regression_data)
    model = make_mlp()
    step = prepared(model, x, y)
    sums = step.sums(tf.constant(x), tf.constant(y), None)
    loss_sum, grads = by_hand(model, x, y)
    np.testing.assert_allclose(float(sums.loss_sum), loss_sum, rtol=1e-6)
    for got, expected in zip(sums.gradients, grads):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-7)
    assert [float(v) for v in sums[2:]] == [6.0, 6.0, 6.0]  # samples, normalizer, rows


def test_sample_weights_weigh_the_sum_and_the_normalizer_counts_samples(regression_data):
    x, y = (a[:5] for a in regression_data)
    w = np.array([0.0, 1.0, 2.0, 0.5, 1.0], np.float32)
    model = make_mlp()
    step = prepared(model, x, y)
    sums = step.sums(tf.constant(x), tf.constant(y), tf.constant(w))
    loss_sum, _ = by_hand(model, x, y, w)
    np.testing.assert_allclose(float(sums.loss_sum), loss_sum, rtol=1e-6)
    assert float(sums.sample_count) == 5.0  # Keras's sum_over_batch_size counts every row


def test_an_activity_regularizer_counts_once_per_sample(regression_data):
    """Keras divides an activity loss by the batch; the micro-step multiplies it back,
    so the window divides it once, like the data loss."""
    x, y = (a[:4] for a in regression_data)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)),
                              keras.layers.Dense(3, activity_regularizer=keras.regularizers.L2(0.1)),
                              keras.layers.Dense(1)])
    step = prepared(model, x, y)
    sums = step.sums(tf.constant(x), tf.constant(y), None)
    hidden = model.layers[0](x)
    activity = 0.1 * float(tf.reduce_sum(tf.square(hidden)))  # summed over the 4 samples
    data_sum, _ = by_hand(model, x, y)
    np.testing.assert_allclose(float(sums.loss_sum), data_sum + activity, rtol=1e-5)


def test_compiled_metrics_see_every_micro_batch(regression_data):
    x, y = (a[:8] for a in regression_data)
    model = make_mlp()
    step = prepared(model, x, y, metrics=["mae"])
    for part in (slice(0, 3), slice(3, 8)):
        step.sums(tf.constant(x[part]), tf.constant(y[part]), None)
    mae = float(np.mean(np.abs(model(x).numpy() - y)))
    np.testing.assert_allclose(model.get_metrics_result()["mae"], mae, rtol=1e-5)


def test_unpack_gives_no_weights_for_pairs():
    assert unpack(("x", "y")) == ("x", "y", None)
    assert unpack(("x", "y", "w")) == ("x", "y", "w")
