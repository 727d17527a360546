"""Runs in its own process: two logical CPU devices must be set up before
TensorFlow starts, which the pytest process has already done.

Prints one JSON object with what tests/training/test_distributed.py checks.
"""

import inspect
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


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )


def data(samples):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, 5)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(samples, 1))).astype("float32")


def reference_weights(x, y, sizes, tail, epochs):
    model = make_model()
    windows = group_windows(micro_batches(x, y, sizes), K, tail, epochs)
    losses = train_big_batches(model, keras.optimizers.Adam(0.01), keras.losses.mean_squared_error, windows)
    return model.get_weights(), losses


def traced_in():
    """The innermost of the trainer's graph-building methods on the call stack.

    (AutoGraph runs converted copies, named ``tf__<method>``.)
    """
    names = [frame.function for frame in inspect.stack()]
    for method in ("_accumulate", "_window", "_windows"):  # innermost first
        if any(name.endswith(method) for name in names):
            return method
    return "eager"


def record_reductions(strategy):
    """Notes the trainer method (loop) every cross-replica reduction is built in."""
    calls = []
    extended = strategy.extended
    for name in ("_reduce_to", "_batch_reduce_to"):
        original = getattr(extended, name)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            calls.append((_name, traced_in()))
            return _original(*args, **kwargs)

        setattr(extended, name, wrapper)
    return calls


def main():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    calls = record_reductions(strategy)
    results = {"replicas": strategy.num_replicas_in_sync, "cases": []}
    # 101 samples in global micro-batches of 8: the last one (5 samples) splits 3/2.
    for samples, tail in [(101, "flush"), (101, "carry"), (100, "drop")]:
        x, y = data(samples)
        sizes = [8] * (samples // 8) + ([samples % 8] if samples % 8 else [])
        with strategy.scope():
            model = make_model()
            trainer = gaviz.AccumulationTrainer(
                model, keras.optimizers.Adam(0.01), "mse", K, tail=tail
            )
        start = model.get_weights()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        history = trainer.fit(ds, epochs=2)
        expected, ref_losses = reference_weights(x, y, sizes, tail, 2)
        results["cases"].append({
            "samples": samples,
            "tail": tail,
            "weights": weights_record(model, expected, start),
            "max_loss_difference": float(np.max(np.abs(np.array(history.loss) - ref_losses))),
            "updates": len(history),
            "reference_updates": len(ref_losses),
            "iterations": int(trainer.optimizer.iterations.numpy()),
            "window_samples": history.samples,
            "effective_batch_size_per_replica_4": trainer.effective_batch_size(4),
            "tracing_count": trainer.tracing_count,
        })
    results["reductions"] = list(calls)  # the three cases above
    # Arrays under a strategy go through tf.data: the same numbers.
    x, y = data(101)
    with strategy.scope():
        model = make_model()
        trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", K)
    start = model.get_weights()
    trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False)
    expected, _ = reference_weights(x, y, [8] * 12 + [5], "flush", 2)
    results["arrays_weights"] = weights_record(model, expected, start)
    # The gallery is for one device: every pitfall refuses two replicas.
    refusals = {}
    for name, cls in gaviz.PITFALLS.items():
        with strategy.scope():
            model, optimizer = make_model(), keras.optimizers.SGD(0.1, global_clipnorm=1.0)
        try:
            cls(model, optimizer, "mse", K, strategy=strategy)
            refusals[name] = None
        except ValueError as error:
            refusals[name] = str(error)
    results["pitfall_refusals"] = refusals
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
