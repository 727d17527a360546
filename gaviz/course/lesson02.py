"""Lesson 02's exercise: a training step for any model, as a ``tf.function``.

::

    from gaviz.course import lesson02
    lesson02.train_step.check(make_train_step)

The checker trains a one-layer linear model with SGD and compares the loss and
the new weights with the closed-form gradient of its mean squared error,
computed in NumPy (an independent answer, not TensorFlow's).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gaviz.course.exercise import Exercise, Incorrect, attempted

_LEARNING_RATE = 0.1
#: Right steps (the solution, a mean squared by hand) move the weights within 1.2e-8 of
#: float64's move (up to 0.31) and return a loss within 1.4e-8 of it, relatively (measured); a
#: learning rate 1% off moves them 3.1e-3 away, a loss 1% off is 1e-2 away. Between:
_ATOL = 1e-6
_RTOL = 1e-5


def _linear_problem(seed=1, samples=8, features=3):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(1)])
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, features)).astype("float32")
    y = rng.normal(size=(samples, 1)).astype("float32")
    return model, x, y


def _mse_and_gradients(kernel, bias, x, y):
    """Mean squared error of ``x @ kernel + bias`` and its gradients, in float64."""
    x, y = x.astype("float64"), y.astype("float64")
    residual = x @ kernel + bias - y
    return (residual**2).mean(), 2 * x.T @ residual / len(x), 2 * residual.sum(axis=0) / len(x)


def _check_train_step(make_train_step) -> str:
    model, x, y = _linear_problem()
    kernel, bias = (w.astype("float64") for w in model.get_weights())
    step = make_train_step(model, keras.optimizers.SGD(_LEARNING_RATE),
                           keras.losses.MeanSquaredError())
    attempted(step)
    if not hasattr(step, "get_concrete_function"):
        raise Incorrect("make_train_step returned a plain Python function: wrap the step in "
                        "`tf.function` (as a decorator inside make_train_step)")
    loss = step(tf.constant(x), tf.constant(y))
    if loss is None:
        raise Incorrect("the step returned None: return the batch's loss")

    expected_loss, kernel_gradient, bias_gradient = _mse_and_gradients(kernel, bias, x, y)
    new_kernel, new_bias = (w.astype("float64") for w in model.get_weights())
    moved = kernel - new_kernel  # learning_rate × the gradient the step applied
    expected_move = _LEARNING_RATE * kernel_gradient
    if np.allclose(moved, 0.0):
        if not np.isclose(float(loss), expected_loss, rtol=_RTOL):
            raise Incorrect(f"the weights did not change, and the step returned a loss of "
                            f"{float(loss):.6f} where this model's is {expected_loss:.6f}: it "
                            "trained another model (the notebook's own?). Use the `model` "
                            "make_train_step was given, for the forward pass and for its "
                            "trainable_variables")
        raise Incorrect("the weights did not change: the step computes the gradients but "
                        "must also hand them to the optimizer (`optimizer.apply_gradients`, as "
                        "the lesson's own train_step does)")
    if np.allclose(moved, len(x) * expected_move, rtol=1e-4):
        raise Incorrect(f"the update is {len(x)} times too large, the batch size: it used the "
                        "gradient of the summed loss; a plain step uses the mean loss, "
                        "`loss_fn(y, predictions)`")
    scale = float(np.sum(moved * expected_move) / np.sum(expected_move ** 2))
    if scale > 0 and not np.isclose(scale, 1.0, rtol=1e-3) and np.allclose(
            moved, scale * expected_move, atol=_ATOL):
        raise Incorrect(f"the weights moved {scale:.3g} times learning_rate × the mean-loss "
                        "gradient: the step applies it with another optimizer, or another "
                        "learning rate, than the `optimizer` make_train_step was given")
    if not (np.allclose(moved, expected_move, atol=_ATOL)
            and np.allclose(bias - new_bias, _LEARNING_RATE * bias_gradient, atol=_ATOL)):
        raise Incorrect("the weights moved, but not by learning_rate × the mean-loss gradient: "
                        "differentiate `loss_fn(y, model(x, training=True))` with respect to "
                        "`model.trainable_variables`")
    if not np.isclose(float(loss), expected_loss, rtol=_RTOL):
        after, _, _ = _mse_and_gradients(new_kernel, new_bias, x, y)
        if np.isclose(float(loss), after, rtol=_RTOL):
            raise Incorrect("the step returned the loss after the update: return the loss "
                            "computed under the tape, before `apply_gradients`")
        raise Incorrect(f"the step returned {float(loss):.6f}; the batch's mean loss before "
                        f"the update is {expected_loss:.6f}")
    step(tf.constant(x), tf.constant(y))
    traces = step.experimental_get_tracing_count()
    if traces != 1:
        raise Incorrect(f"two calls with same-shaped batches traced the step {traces} times: "
                        "make the tf.function once in make_train_step and return it, not a "
                        "new one per call")
    return ("one traced step: the mean-loss gradient, applied once, and the loss before the "
            "update")


train_step = Exercise(
    "02 make_train_step", _check_train_step,
    ["Define `train_step(x, y)` inside make_train_step, so it uses the model and optimizer "
     "passed in, decorate it with `@tf.function`, and return it (the function, not a call).",
     "Inside the step: the forward pass and the loss under `tf.GradientTape()`, then "
     "`tape.gradient`, then `optimizer.apply_gradients`; return the loss.",
     "The lesson's own `train_step` above is the body you need."],
    "02_train_step.py")
