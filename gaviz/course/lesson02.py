"""Lesson 02's exercise: a `tf.function` training step made for any model."""

import keras
import numpy as np
import tensorflow as tf

from gaviz.course.exercise import Exercise, Incorrect, NotAttempted


def _check_train_step(make_train_step) -> str:
    keras.utils.set_random_seed(1)
    linear = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    kernel, bias = [w.astype("float64") for w in linear.get_weights()]
    step = make_train_step(linear, keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError())
    if step is None:
        raise NotAttempted("make_train_step still returns None")
    if not hasattr(step, "get_concrete_function"):
        raise Incorrect("the returned step is not a tf.function: wrap it with @tf.function")
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(8, 3)).astype("float32")
    ys = rng.normal(size=(8, 1)).astype("float32")
    loss = step(tf.constant(xs), tf.constant(ys))
    residual = xs @ kernel + bias - ys  # the independent answer: MSE and its gradient by hand
    if loss is None or not np.isclose(float(loss), float((residual**2).mean()), rtol=1e-5):
        raise Incorrect(f"the step should return the batch's mean loss before the update, "
                        f"{float((residual**2).mean()):.6f}; got {loss}")
    new_kernel, new_bias = linear.get_weights()
    if not (np.allclose(new_kernel, kernel - 0.1 * 2 * xs.T @ residual / len(xs), atol=1e-6) and
            np.allclose(new_bias, bias - 0.1 * 2 * residual.sum(axis=0) / len(xs), atol=1e-6)):
        raise Incorrect("the weights did not move by the mean-loss gradient: apply "
                        "tape.gradient(loss, model.trainable_variables) with the optimizer")
    step(tf.constant(xs), tf.constant(ys))
    if step.experimental_get_tracing_count() != 1:
        raise Incorrect("same-shaped batches should reuse one trace")
    return "the loss, the update and one trace, against the gradient worked out by hand"


train_step = Exercise(
    "02 make_train_step", _check_train_step,
    hints=["Define the step function inside make_train_step, decorated with @tf.function, and "
           "return it.",
           "Inside: the loss under tf.GradientTape, then "
           "optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables)); return the "
           "loss."],
    solution_file="02_train_step.py")
