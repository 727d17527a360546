"""Lesson 10's own distributed loops, in a process of their own: two logical CPU devices
must be set up before TensorFlow starts, which the pytest process has already done.

The classic loop (each micro-batch's mean gradient / k into ON_READ sums inside
strategy.run, apply_gradients after it), gaviz.Accumulator's step in its place, Keras's
built-in on one device, and the single-device big batch, on lesson 10's data and sizes.
Prints one JSON object for tests/course/test_lesson10.py.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import gaviz  # noqa: E402
from gaviz.course import max_difference  # noqa: E402

SEED, SAMPLES, PER_REPLICA, K, EPOCHS, RATE = 0, 1000, 16, 4, 2, 1e-2

x, y = gaviz.demo.make_data(SAMPLES, seed=SEED)
strategy = tf.distribute.MirroredStrategy()
replicas = strategy.num_replicas_in_sync
micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_REPLICA * replicas)
distributed = strategy.experimental_distribute_dataset(micro_batches)
per_sample = keras.losses.MeanSquaredError(reduction="none")


def fit(batch_size, optimizer):
    model = gaviz.demo.make_model(seed=SEED)
    model.compile(optimizer, "mse")
    model.fit(x, y, batch_size=batch_size, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


def classic():
    with strategy.scope():
        model = gaviz.demo.make_model(seed=SEED)
        optimizer = keras.optimizers.Adam(RATE)
        optimizer.build(model.trainable_variables)
        sums = [tf.Variable(tf.zeros_like(v), trainable=False,
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM)
                for v in model.trainable_variables]

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_sample(y, model(x, training=True)))
        for total, gradient in zip(sums, tape.gradient(loss, model.trainable_variables)):
            total.assign_add(gradient / K)

    @tf.function
    def micro_step(x, y):
        strategy.run(replica_step, args=(x, y))

    @tf.function
    def update():
        optimizer.apply_gradients(zip([t.read_value() for t in sums], model.trainable_variables))
        for total in sums:
            total.assign(tf.zeros_like(total))

    for _ in range(EPOCHS):
        for i, (x_micro, y_micro) in enumerate(distributed, start=1):
            micro_step(x_micro, y_micro)
            if i % K == 0:
                update()
        if i % K:
            update()
    return model, int(optimizer.iterations.numpy())


def accumulated():
    with strategy.scope():
        model = gaviz.demo.make_model(seed=SEED)
        accumulator = gaviz.Accumulator(keras.optimizers.Adam(RATE), model.trainable_variables,
                                        accumulation_steps=K)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_sample(y, model(x, training=True)))
        accumulator.step(tape.gradient(loss, model.trainable_variables), count=tf.shape(x)[0])

    @tf.function
    def micro_step(x, y):
        strategy.run(replica_step, args=(x, y))

    for _ in range(EPOCHS):
        for x_micro, y_micro in distributed:
            micro_step(x_micro, y_micro)
        accumulator.flush()
    return model, int(accumulator.optimizer.iterations.numpy())


reference = fit(PER_REPLICA * K * replicas, keras.optimizers.Adam(RATE))
builtin = fit(PER_REPLICA * replicas, keras.optimizers.Adam(RATE, gradient_accumulation_steps=K))
classic_model, classic_updates = classic()
accumulated_model, accumulated_updates = accumulated()
print("RESULT " + json.dumps({
    "replicas": replicas,
    "moved": max_difference(reference, gaviz.demo.make_model(seed=SEED)),
    "classic_updates": classic_updates,
    "classic_gap": max_difference(classic_model, reference),
    "classic_vs_builtin": max_difference(classic_model, builtin),
    "accumulator_updates": accumulated_updates,
    "accumulator_gap": max_difference(accumulated_model, reference),
}))
