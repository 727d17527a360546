"""gaviz.Accumulator under MirroredStrategy on two logical CPU devices, in its
own process (logical devices must be set before TensorFlow starts).

Prints one JSON line, ``RESULT {...}``, with what tests/training/test_distributed.py checks.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import weights_record  # noqa: E402
from reference import group_windows, micro_batches, train_big_batches  # noqa: E402

import gaviz  # noqa: E402

K = 3
GLOBAL_BATCH = 8  # 4 per replica
ROWS = 44  # 5 full micro-batches and one of 4: two windows, the second partial


def layers():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5,))
    return inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))


def data(rows=ROWS, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(rows, 1))).astype("float32")


def mse(y, p):
    return tf.reduce_mean(tf.square(y - p), axis=-1)


def reference(make_optimizer, rows=ROWS):
    x, y = data(rows)
    sizes = [GLOBAL_BATCH] * (rows // GLOBAL_BATCH) + [rows % GLOBAL_BATCH]
    model = keras.Model(*layers())
    train_big_batches(model, make_optimizer(), mse,
                      group_windows(micro_batches(x, y, sizes), K, "flush", 1))
    return model


def distributed(strategy, rows=ROWS):
    x, y = data(rows)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    return strategy.experimental_distribute_dataset(dataset)


def stepped(strategy, rows):
    """acc.step inside strategy.run, in a tf.function, over ``rows`` rows;
    flush after the data. Returns what each step said, the run's figures."""
    with strategy.scope():
        model = keras.Model(*layers())
        optimizer = keras.optimizers.Adam(0.05)
        acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)
        loss_fn = keras.losses.MeanSquaredError()  # divides by the replicas itself
    start = model.get_weights()

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return acc.step(tape.gradient(loss, model.trainable_variables), tf.shape(x)[0])

    @tf.function
    def train_step(batch):
        return strategy.run(replica_step, args=batch)

    said = [bool(strategy.experimental_local_results(train_step(b))[0])
            for b in distributed(strategy, rows)]
    acc.flush()
    expected = reference(lambda: keras.optimizers.Adam(0.05), rows)
    return dict(weights=weights_record(model, expected, start),
                said=said, iterations=int(optimizer.iterations.numpy()),
                tracing_count=train_step.experimental_get_tracing_count())


def step_in_replica_context(strategy):
    return stepped(strategy, ROWS)


def an_empty_replica_share(strategy):
    """41 rows: the last global micro-batch has one row, so one replica gets none."""
    return stepped(strategy, 41)


def add_then_apply(strategy):
    """The classic distributed loop's shape: add inside strategy.run, apply
    after it, in cross-replica context."""
    with strategy.scope():
        model = keras.Model(*layers())
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
        acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)
        loss_fn = keras.losses.MeanSquaredError()
    start = model.get_weights()

    def replica_add(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        acc.add(tape.gradient(loss, model.trainable_variables), tf.shape(x)[0])

    @tf.function
    def add_step(batch):
        strategy.run(replica_add, args=batch)

    apply_step = tf.function(acc.apply)
    for i, batch in enumerate(distributed(strategy)):
        add_step(batch)
        if i % K == K - 1:
            apply_step()
    acc.flush()  # eagerly, outside strategy.scope()
    expected = reference(lambda: keras.optimizers.SGD(0.1, momentum=0.9))
    return dict(weights=weights_record(model, expected, start),
                iterations=int(optimizer.iterations.numpy()))


class OwnStep(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        self.accumulator.step(tape.gradient(loss, self.trainable_variables), tf.shape(x)[0])
        return {"loss": loss}


def train_step_under_model_fit(strategy):
    """A model's own train_step under Model.fit and MirroredStrategy, where
    Keras's gradient_accumulation_steps fails (keras-team/keras#20582)."""
    x, y = data()
    x_val, y_val = data(16, seed=3)
    with strategy.scope():
        model = OwnStep(*layers())
        model.compile(keras.optimizers.Adam(0.05), "mse")
        model.accumulator = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    start = model.get_weights()
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0,
                        validation_data=(x_val, y_val),
                        callbacks=[gaviz.FlushAtEpochEnd(model.accumulator)])
    big = keras.Model(*layers())
    big.compile(keras.optimizers.Adam(0.05), "mse")
    expected = big.fit(x, y, batch_size=GLOBAL_BATCH * K, epochs=2, shuffle=False, verbose=0,
                       validation_data=(x_val, y_val))
    return dict(weights=weights_record(model, big, start), iterations=int(model.optimizer.iterations.numpy()),
                val_loss=history.history["val_loss"],
                expected_val_loss=expected.history["val_loss"])


def keras_built_in_under_model_fit(strategy):
    """What the Accumulator replaces: Keras's own option, same loop."""
    x, y = data()
    with strategy.scope():
        model = keras.Model(*layers())
        model.compile(keras.optimizers.Adam(0.05, gradient_accumulation_steps=K), "mse")
    try:
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, verbose=0)
    except Exception as error:  # noqa: BLE001 - the error is the result
        return dict(error=f"{type(error).__name__}: {error}"[:300])
    return dict(error=None)


def loss_scale_skips_a_window_one_replica_overflowed(strategy):
    """One replica's share is not finite: every replica skips the window."""
    with strategy.scope():
        model = keras.Model(*layers())
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.05))
        acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)
        loss_fn = keras.losses.MeanSquaredError()
    start = model.get_weights()

    def replica_step(x, y, poison):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        factor = tf.where(tf.logical_and(poison, tf.equal(replica, 1)), np.inf, 1.0)
        with tf.GradientTape() as tape:
            loss = optimizer.scale_loss(loss_fn(y, model(x, training=True))) * factor
        return acc.step(tape.gradient(loss, model.trainable_variables), tf.shape(x)[0])

    @tf.function
    def train_step(batch, poison):
        return strategy.run(replica_step, args=batch + (poison,))

    batches = list(distributed(strategy))
    for batch in batches[:K]:
        train_step(batch, tf.constant(False))
    clean = weights_record(model, reference_first_window(lambda: keras.optimizers.Adam(0.05)),
                           start)
    scale, before = float(optimizer.dynamic_scale.numpy()), model.get_weights()
    for i, batch in enumerate(batches[K:2 * K - 1] + batches[:1]):
        train_step(batch, tf.constant(i == 1))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), before))
    return dict(clean_weights=clean, iterations=int(optimizer.iterations.numpy()),
                scale_before=scale, scale_after=float(optimizer.dynamic_scale.numpy()),
                moved=moved, micro_steps_in_window=int(acc.micro_steps_in_window.numpy()))


def reference_first_window(make_optimizer):
    x, y = data()
    model = keras.Model(*layers())
    window = (x[:GLOBAL_BATCH * K], y[:GLOBAL_BATCH * K])
    train_big_batches(model, make_optimizer(), mse, [window])
    return model


def refusals(strategy):
    with strategy.scope():
        model = keras.Model(*layers())
        said = {}
        try:
            gaviz.Accumulator(keras.optimizers.Adam(0.05, clipnorm=1.0),
                              model.trainable_variables, K)
        except ValueError as error:
            said["clipping"] = str(error)
        acc = gaviz.Accumulator(keras.optimizers.Adam(0.05), model.trainable_variables, K)
        try:
            acc.add([tf.zeros(v.shape) for v in model.trainable_variables], 4)
        except ValueError as error:
            said["cross_replica_add"] = str(error)
    try:  # outside the scope the model was built in
        gaviz.Accumulator(keras.optimizers.Adam(0.05), model.trainable_variables, K)
    except ValueError as error:
        said["outside_scope"] = str(error)
    return said


def main():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    cases = (step_in_replica_context, an_empty_replica_share, add_then_apply, train_step_under_model_fit,
             keras_built_in_under_model_fit, loss_scale_skips_a_window_one_replica_overflowed,
             refusals)
    result = {"replicas": strategy.num_replicas_in_sync}
    result.update({case.__name__: case(strategy) for case in cases})
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
