"""Solution to lesson 08's exercise: one graph call per window.

The loop over the window's micro-batches moves into the ``tf.function``: it takes
the dataset's iterator and pulls up to k micro-batches with
``get_next_as_optional`` (the last window of an epoch may be shorter). AutoGraph
turns the ``for`` over ``tf.range`` into a graph loop and the ``if`` on tensors
into ``tf.cond``. Python sees one call per update.
"""

import tensorflow as tf

from gaviz.course import make_accumulators, penalty_gradients


def make_graph_trainer(model, optimizer, loss, accumulation_steps):
    variables = model.trainable_variables
    accumulators = make_accumulators(variables)
    sample_count = tf.Variable(0.0, trainable=False)  # changes between calls: a tf.Variable

    @tf.function
    def train_window(iterator):
        for _ in tf.range(accumulation_steps):
            micro_batch = iterator.get_next_as_optional()
            if not micro_batch.has_value():
                break
            x, y = micro_batch.get_value()
            with tf.GradientTape() as tape:
                loss_sum = tf.reduce_sum(loss.call(y, model(x, training=True)))
            for accumulator, gradient in zip(accumulators, tape.gradient(loss_sum, variables)):
                accumulator.assign_add(gradient)
            sample_count.assign_add(tf.cast(tf.shape(x)[0], tf.float32))
        applied = sample_count > 0
        if applied:  # a full window, or the epoch's partial one
            gradients = [a / sample_count + p for a, p in zip(accumulators, penalty_gradients(model))]
            optimizer.apply_gradients(zip(gradients, variables))
            for accumulator in accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
            sample_count.assign(0.0)
        return applied

    def train_epoch(micro_batches):
        iterator, updates = iter(micro_batches), 0
        while bool(train_window(iterator)):  # one graph call, one host sync, per update
            updates += 1
        return updates

    return train_epoch
