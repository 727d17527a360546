"""Solution to lesson 02: one training step as a ``tf.function``.

The step computes the mean loss of a batch (Keras's ``sum_over_batch_size``),
its gradient with respect to the model's trainable variables, and applies it.
"""

import tensorflow as tf


def make_train_step(model, optimizer, loss_fn):
    """Returns ``train_step(x, y) -> mean loss``, a ``tf.function``.

    Each call applies one optimizer update to ``model`` and returns the
    batch's mean loss measured before the update. A factory, not one global
    function: a traced function keeps the variables it saw while tracing, so
    each model gets its own.

    Args:
        model: a ``keras.Model``.
        optimizer: a Keras optimizer.
        loss_fn: a Keras loss object (or any ``(y_true, y_pred) -> scalar``).
    """

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return train_step
