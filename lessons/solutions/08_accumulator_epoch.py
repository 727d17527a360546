"""Solution to lesson 08's second exercise: an epoch of your own loop on gaviz.Accumulator.

The micro-step computes the loss as any training step does: the micro-batch's
*mean* loss (plus the model's weight penalty, if it has one). ``step`` takes
its gradient and the ``count`` that mean divided by, the micro-batch's rows:
it adds ``count x gradient``, the gradient of the summed loss, and once the
window holds ``accumulation_steps`` micro-batches it divides by the window's
rows and applies one update. A weight penalty, the same in every micro-batch,
comes out of that weighted mean once, as in ``Model.fit``. ``flush`` applies
the partial window at the end of the epoch, divided by its own rows.
"""

import tensorflow as tf

import gaviz


def accumulator_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
    """Trains one epoch in place: one update per ``accumulation_steps`` micro-batches, and
    one for the partial window at the end."""
    accumulator = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps)

    @tf.function(input_signature=micro_batches.element_spec)  # one graph call per micro-step
    def micro_step(x, y):
        with tf.GradientTape() as tape:
            mean_loss = loss(y, model(x, training=True))  # a mean over the micro-batch's rows
            if model.losses:  # a weight penalty: the same in every micro-batch
                mean_loss += tf.add_n(model.losses)
        gradients = tape.gradient(mean_loss, model.trainable_variables)
        accumulator.step(gradients, count=tf.shape(x)[0])  # what the mean divided by: its rows

    for x, y in micro_batches:
        micro_step(x, y)
    accumulator.flush()  # the partial window, divided by its own rows
