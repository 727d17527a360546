"""Solution to lesson 10's exercise: a distributed loop's replica step on gaviz.Accumulator.

``strategy.run`` calls ``replica_step`` on every replica with its share of the
global micro-batch. The loss is the one a replica would hand
``apply_gradients``: ``tf.nn.compute_average_loss`` sums the replica's
per-sample losses and divides by the global micro-batch's rows, so the
replicas' gradients add up to the big batch's; ``step`` multiplies that back
by the replicas. ``count`` is this replica's rows: a short last micro-batch
splits unevenly (3 rows: 2 and 1), and each share weighs its rows.
"""

import keras
import tensorflow as tf

per_sample_mse = keras.losses.MeanSquaredError(reduction="none")


def make_replica_step(model, accumulator):
    """Returns ``replica_step(x, y)``, for ``strategy.run``: one micro-step on this replica."""

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_sample_mse(y, model(x, training=True)))
        gradients = tape.gradient(loss, model.trainable_variables)
        accumulator.step(gradients, count=tf.shape(x)[0])  # this replica's rows

    return replica_step
