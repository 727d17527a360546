"""Solution to the capstone's exercise: lesson 08's window, normalized by real tokens.

Lesson 08's trainer with two changes, both in the micro-step: the padding's
per-token losses are masked out of the sum (padding is token 0), and the count
adds the micro-batch's real tokens instead of its lines. The update is
unchanged: it divides the window's sum by the window's count, which is now the
window's real-token count, as one big batch of the same lines would.
"""

import tensorflow as tf

from gaviz.course import make_accumulators, penalty_gradients


def make_token_window(model, optimizer, loss, element_spec):
    """Returns a ``tf.function`` ``window(iterator, accumulation_steps)`` that reads up to
    ``accumulation_steps`` micro-batches of padded lines, applies one update divided by
    their real tokens if it read any, and returns how many it read."""
    del element_spec  # the micro-batches come from the iterator, inside the graph
    variables = model.trainable_variables
    accumulators = make_accumulators(variables)
    token_count = tf.Variable(0.0, trainable=False)
    optimizer.build(variables)  # its variables now, not during the first trace

    def micro_step(x, y):
        real = tf.cast(x != 0, tf.float32)  # 1 for a real token, 0 for padding
        with tf.GradientTape() as tape:
            per_token = loss.call(y, model(x, training=True))
            summed = tf.reduce_sum(per_token * real)  # the padding's losses left out
        for accumulator, gradient in zip(accumulators, tape.gradient(summed, variables)):
            accumulator.assign_add(tf.convert_to_tensor(gradient))  # an embedding's is sparse
        token_count.assign_add(tf.reduce_sum(real))  # tokens, not lines

    def update():
        penalty = penalty_gradients(model)  # weight penalties (model.losses): once per update
        gradients = [a / token_count + p for a, p in zip(accumulators, penalty)]
        optimizer.apply_gradients(zip(gradients, variables))
        for accumulator in accumulators:  # the reset
            accumulator.assign(tf.zeros_like(accumulator))
        token_count.assign(0.0)

    @tf.function
    def window(iterator, accumulation_steps):
        consumed = tf.constant(0)
        for _ in tf.range(accumulation_steps):
            batch = iterator.get_next_as_optional()  # empty at the end of the data: no error
            tf.cond(batch.has_value(), lambda: micro_step(*batch.get_value()), lambda: None)
            consumed += tf.cast(batch.has_value(), tf.int32)
        tf.cond(consumed > 0, update, lambda: None)  # a full window, or the partial one
        return consumed

    return window
