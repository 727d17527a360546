"""Solution to lesson 08's exercise: one graph call per window.

The whole trainer on one screen. What changes between calls lives in
``tf.Variable``s (the accumulators, the sample count), created once, outside
the ``tf.function``. The micro-batches are read from the iterator inside the
graph, so one call runs a whole window; the graph decides with ``tf.cond``
whether a micro-batch came and whether the window holds anything to apply (the
partial window at the end of an epoch), on every call, where a Python ``if``
would decide once, while tracing.
"""

import tensorflow as tf

from gaviz.course import make_accumulators, penalty_gradients


def make_window(model, optimizer, loss, element_spec):
    """Returns a ``tf.function`` ``window(iterator, accumulation_steps)`` that reads up to
    ``accumulation_steps`` micro-batches, applies one update if it read any, and returns
    how many it read."""
    del element_spec  # the micro-batches come from the iterator, inside the graph
    variables = model.trainable_variables
    accumulators = make_accumulators(variables)
    sample_count = tf.Variable(0.0, trainable=False)
    optimizer.build(variables)  # its variables now, not during the first trace

    def micro_step(x, y):
        with tf.GradientTape() as tape:
            per_sample = loss.call(y, model(x, training=True))
            summed = tf.reduce_sum(per_sample)  # sums add up; means do not
        for accumulator, gradient in zip(accumulators, tape.gradient(summed, variables)):
            accumulator.assign_add(gradient)
        sample_count.assign_add(tf.cast(tf.shape(per_sample)[0], tf.float32))

    def update():
        penalty = penalty_gradients(model)  # weight penalties (model.losses): once per update
        gradients = [a / sample_count + p for a, p in zip(accumulators, penalty)]
        optimizer.apply_gradients(zip(gradients, variables))
        for accumulator in accumulators:  # the reset
            accumulator.assign(tf.zeros_like(accumulator))
        sample_count.assign(0.0)

    @tf.function
    def window(iterator, accumulation_steps):
        consumed = tf.constant(0)
        for _ in tf.range(accumulation_steps):  # a loop in the graph, not k copies of its body
            batch = iterator.get_next_as_optional()  # empty at the end of the data: no error
            tf.cond(batch.has_value(), lambda: micro_step(*batch.get_value()), lambda: None)
            consumed += tf.cast(batch.has_value(), tf.int32)
        tf.cond(consumed > 0, update, lambda: None)  # a full window, or the partial one
        return consumed

    return window
