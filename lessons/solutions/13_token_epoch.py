"""Solution to the capstone's exercise: lesson 08's loop on gaviz.Accumulator, counting tokens.

Lesson 08's ``accumulator_epoch`` with one change: ``count``. Keras's loss on
the language model's output is a mean over the micro-batch's *real* tokens
(the embedding's mask reaches the loss, so padding is left out), so ``count``
is the micro-batch's real tokens, the mask's ones, not its lines. The window
then divides the summed real-token losses by its real-token count, as one big
batch of the same lines would. ``flush`` applies the last, partial window.
"""

import tensorflow as tf

import gaviz


def token_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
    """Trains one epoch in place, each update divided by its window's real tokens."""
    accumulator = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps)

    @tf.function(input_signature=micro_batches.element_spec)  # one graph call per micro-step
    def micro_step(x, y):
        with tf.GradientTape() as tape:
            mean_loss = loss(y, model(x, training=True))  # a mean over the real tokens
        gradients = tape.gradient(mean_loss, model.trainable_variables)
        real_tokens = tf.reduce_sum(tf.cast(x != 0, tf.float32))  # padding is token 0
        accumulator.step(gradients, count=real_tokens)  # what the mean divided by

    for x, y in micro_batches:
        micro_step(x, y)
    accumulator.flush()  # the partial window, divided by its own real tokens
