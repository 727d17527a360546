"""Lesson 10's exercise: the replica step of a distributed loop, on ``gaviz.Accumulator``.

::

    from gaviz.course import lesson10
    lesson10.replica_step.check(make_replica_step)

The learner's ``make_replica_step(model, accumulator)`` returns
``replica_step(x, y)``, which ``strategy.run`` calls on every replica with its
share of a global micro-batch: the loss divided as the one a replica hands
``apply_gradients`` (``tf.nn.compute_average_loss``), its gradient, and
``accumulator.step(gradients, count=<this replica's rows>)``. The check runs it
under ``MirroredStrategy`` over the kernel's devices (the lesson makes two
logical CPUs) on data whose last window holds a ragged micro-batch split
unevenly across replicas, and compares with one device's big batch.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.loop import flat_weights
from gaviz.training import Accumulator

K = 3
GLOBAL_MICRO_BATCH = 8
#: 7 global micro-batches of 8 and one of 3: windows of 3, 3 and a partial one of 2 (8 + 3 rows;
#: the 3 rows split 2 and 1 over two replicas).
SAMPLES = 7 * GLOBAL_MICRO_BATCH + 3
UPDATES = 3
LEARNING_RATE = 0.1
#: Right answers (the solution, a mean divided by the replicas by hand, a float count) land
#: 6.0e-8 from one device's big batch on one replica (measured); a count off by a tenth of a row
#: on the last window's short micro-batch lands 7.6e-4 away, by a row 7.1e-3, a loss over a
#: fixed 8 rows 2.1e-2. 1e-5 is between.
TOLERANCE = 1e-5
_PER_SAMPLE = keras.losses.MeanSquaredError(reduction="none")


@contextlib.contextmanager
def _quiet_strategy():
    """Keeps tf.distribute's INFO lines (devices, each step it plans) off the screen."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _data():
    x, y = demo.make_data(SAMPLES, seed=2)
    return x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_MICRO_BATCH)


def _distributed_run(make_replica_step, strategy, micro_batches):
    """One epoch of the lesson's loop with the learner's replica step: (model, updates, the
    weights after the first update or None)."""
    with strategy.scope():
        model = demo.make_model(seed=2, hidden=8)
        accumulator = Accumulator(keras.optimizers.SGD(LEARNING_RATE),
                                  model.trainable_variables, accumulation_steps=K)
    replica_step = make_replica_step(model, accumulator)
    attempted(replica_step)

    @tf.function
    def micro_step(x, y):
        strategy.run(replica_step, args=(x, y))

    optimizer, first = accumulator.optimizer, None
    for x, y in strategy.experimental_distribute_dataset(micro_batches):
        micro_step(x, y)
        if first is None and int(optimizer.iterations.numpy()) == 1:
            first = flat_weights(model)
    accumulator.flush()
    return model, int(optimizer.iterations.numpy()), first


@functools.lru_cache(maxsize=2)
def _big_batch(samples):
    """One device, Model.fit on batches of k global micro-batches (the first ``samples``)."""
    x, y, _ = _data()
    model = demo.make_model(seed=2, hidden=8)
    model.compile(keras.optimizers.SGD(LEARNING_RATE), "mse")
    model.fit(x[:samples], y[:samples], batch_size=K * GLOBAL_MICRO_BATCH, shuffle=False,
              verbose=0)
    return flat_weights(model)


def _check_replica_step(make_replica_step) -> str:
    with _quiet_strategy():
        # Its own strategy, reducing through one device: a second MirroredStrategy's collective
        # all-reduces would reuse the instance keys of the lesson's, which TensorFlow refuses.
        strategy = tf.distribute.MirroredStrategy(
            cross_device_ops=tf.distribute.ReductionToOneDevice())
        replicas = strategy.num_replicas_in_sync
        model, updates, first = _distributed_run(make_replica_step, strategy, _data()[2])
    if updates == 1:
        raise Incorrect(
            f"1 update for 8 global micro-batches with accumulation_steps={K}, expected "
            f"{UPDATES}: only the loop's flush applied anything. `add` only adds a micro-batch, "
            "it never applies; `step` adds, then applies once the window holds k")
    if updates != UPDATES:
        raise Incorrect(
            f"{updates} updates for 8 global micro-batches with accumulation_steps={K}: "
            f"expected {UPDATES}. Call accumulator.step(gradients, count) in replica_step (not "
            "optimizer.apply_gradients): it applies once the window holds k")
    difference = float(np.max(np.abs(flat_weights(model) - _big_batch(SAMPLES))))
    if difference <= TOLERANCE:  # a NaN is not: it goes on to be named
        one = ("; with one replica here no share can be uneven: the lesson's two replicas test "
               "that" if replicas == 1 else "")
        return (f"{replicas} replica{'s' * (replicas > 1)}, {updates} updates (the last window's "
                f"micro-batches of 8 and 3 rows included): the weights of one device's big "
                f"batch, to {difference:.0e}{one}")
    before = flat_weights(demo.make_model(seed=2, hidden=8))
    ratio = float(np.linalg.norm(first - before) /
                  np.linalg.norm(_big_batch(K * GLOBAL_MICRO_BATCH) - before))
    if replicas > 1 and abs(ratio - replicas) < 0.05:
        raise Incorrect(
            f"the first update is {ratio:.2f}x the big batch's, as many times as there are "
            "replicas: under a strategy, differentiate the loss you would hand apply_gradients, "
            "divided by the replicas too: `tf.nn.compute_average_loss(per_sample)` (sum over "
            "the global micro-batch's rows); step multiplies it back")
    if abs(ratio - GLOBAL_MICRO_BATCH) < 0.2 or abs(ratio - GLOBAL_MICRO_BATCH / replicas) < 0.2:
        raise Incorrect(
            f"the first update is {ratio:.2f}x the big batch's: the gradient of a summed loss. "
            "step takes the gradient of a mean and weighs it by count itself")
    if abs(ratio - 1) < 1e-3:
        split = " (the 3 split 2 and 1 over the replicas)" if replicas > 1 else ""
        said = (f"the full windows are right, but the last one, micro-batches of 8 and 3 "
                f"rows{split}, is off: the weights end {difference:.1e} from the big batch's")
        with _quiet_strategy():
            fault = _nearest_fault(model, strategy)
        if fault is not None:
            raise Incorrect(f"{said}. {fault.message}")
        raise Incorrect(f"{said}: compare this replica's loss and count with lesson 08's")
    raise Incorrect(f"the weights end {difference:.1e} from one device's big batch (its first "
                    f"update is {ratio:.2f}x the big batch's): compare with lesson 08's loop")


class _Fault(NamedTuple):
    """A replica step wrong only where micro-batches differ in rows: what its loss is divided
    by (``"rows"``: the global micro-batch's own, as compute_average_loss does; ``"fixed"``: a
    full one's, 8) and its ``count`` (``"rows"``: this replica's; ``"fixed"``: 1, and any
    number the same for every share trains alike), and what to tell a learner whose weights
    are its."""

    loss: str
    count: str
    message: str


_FAULTS = [
    _Fault("rows", "fixed",
           "`count` is what this replica's loss divided by, and a fixed number (1, k, the global "
           "micro-batch) weighs every share the same, the mean of means: count this replica's "
           "own rows, its share of the global micro-batch"),
    _Fault("fixed", "rows",
           f"Each micro-batch's loss is divided by a fixed {GLOBAL_MICRO_BATCH}, a full global "
           f"micro-batch's rows (compute_average_loss's global_batch_size={GLOBAL_MICRO_BATCH}, "
           "or by hand), and the last holds 3. `count` is right, this replica's rows; leave "
           "global_batch_size out, so that compute_average_loss divides by the global "
           "micro-batch's own rows"),
]


def _fault_step(fault: _Fault):
    """make_replica_step that follows ``fault``'s rule."""
    def make_replica_step(model, accumulator):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_sample = _PER_SAMPLE(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(
                    per_sample, global_batch_size=GLOBAL_MICRO_BATCH if fault.loss == "fixed"
                    else None)
            count = tf.shape(x)[0] if fault.count == "rows" else 1.0
            accumulator.step(tape.gradient(loss, model.trainable_variables), count=count)
        return replica_step
    return make_replica_step


def _nearest_fault(model, strategy):
    """The fault whose weights ``model``'s are, within the tolerance, or None."""
    mine = flat_weights(model)
    for fault in _FAULTS:
        theirs, _, _ = _distributed_run(_fault_step(fault), strategy, _data()[2])
        if float(np.max(np.abs(mine - flat_weights(theirs)))) <= TOLERANCE:
            return fault
    return None


replica_step = Exercise(
    "10 the replica step on gaviz.Accumulator",
    _check_replica_step,
    hints=[
        "Inside make_replica_step, define replica_step(x, y) and return it. Its body is lesson "
        "08's micro-step: a tape, the loss, its gradient, accumulator.step(gradients, count=...).",
        "The loss: `tf.nn.compute_average_loss(keras.losses.MeanSquaredError(reduction='none')"
        "(y, model(x, training=True)))`, the replica's summed loss over the global rows.",
        "`count` is this replica's share of the rows, `tf.shape(x)[0]`: x is the replica's "
        "share, and the last global micro-batch splits unevenly.",
    ],
    solution_file="10_replica_step.py",
)
