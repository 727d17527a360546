"""4b. One all-reduce per update against one per micro-step, on two logical CPUs.

MirroredStrategy over two logical CPU devices, the MLP of bench_dispatch
(64-256-256-1, SGD), per-replica micro-batch 32 (global 64), k in
1 2 4 8 16. Two trainers that compute the same update:

- gaviz: micro-steps add into each replica's own running sums, with no
  communication; the window's sums cross replicas once, after the loop, in
  one batched all-reduce;
- ``AllReduceEveryMicroStep`` (defined here): the same trainer with the
  all-reduce moved into the micro-step, so each micro-batch's gradients are
  summed across replicas before they are added. Exactly as correct, but it
  communicates k times per update: what PyTorch DDP does when the
  accumulation loop forgets ``no_sync()``.

Both train the same number of epochs from the same weights; the script
checks that they agree (weights after the first epoch, loss after the last)
and fails if they do not: a timing of a wrong trainer is worthless. It
reports the median epoch of each and their ratio, measured side by side in
one alternating run.

Two logical devices share one process, one memory and the same two cores:
an all-reduce here is an add and a local copy, so this measures the fixed
cost of a collective, not a link's bandwidth or latency.

    python benchmarks/bench_allreduce.py [--rounds 21] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse

import harness  # first: quiets TensorFlow before it is imported
import tensorflow as tf

# Two logical CPU devices must be configured before TensorFlow initializes
# its runtime (before any op runs or any device is listed as logical), so
# this script has to be its own process.
try:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
except RuntimeError as error:
    raise RuntimeError(
        "bench_allreduce.py needs two logical CPU devices, which can only be set up "
        "before TensorFlow initializes: run it as its own process."
    ) from error

import keras  # noqa: E402
import numpy as np  # noqa: E402
from bench_dispatch import (  # noqa: E402
    FEATURES,
    LR,
    data,
    full_data_loss,
    make_model,
    max_weight_difference,
    micro_batches,
)

import gaviz  # noqa: E402

KS = (1, 2, 4, 8, 16)
PER_REPLICA_MICRO = 32
REPLICAS = 2
# What the two trainers may differ by before one of them is taken to be wrong
# and the script fails. Rounding alone gives ~1e-8 in the weights after one
# epoch and ~1e-5 in the final loss after 22; a wrong normalization (a
# replica-local sample count, say) gives ~1e-2 in both.
WEIGHT_TOLERANCE = 1e-4  # largest weight difference after the first epoch
LOSS_TOLERANCE = 1e-3  # relative difference of the final loss, after every epoch


class AllReduceEveryMicroStep(gaviz.AccumulationTrainer):
    """gaviz with one all-reduce per micro-step instead of one per update.

    Each micro-batch's gradients, objective, sample count and normalizer are
    summed across replicas (one batched all-reduce) as soon as its backward
    pass ends, before they are added to the running sums, which are
    therefore the same on every replica; the window's all-reduce then has
    nothing left to do. The update is the same as gaviz's (up to the order of
    float additions), but the replicas communicate ``accumulation_steps``
    times per update instead of once: PyTorch DDP's behaviour in an
    accumulation loop without ``no_sync()``. It is the exact trainer with one
    field of its documented ``Rule`` changed, nothing private.
    """

    rule = gaviz.Rule(reduce_each_micro_batch=True)


def make_trainer(cls, strategy, k):
    with strategy.scope():
        return cls(make_model(), keras.optimizers.SGD(LR), "mse", k, strategy=strategy)


def per_update(k):
    return f"one all-reduce per update, k = {k}"


def per_micro_step(k):
    return f"one all-reduce per micro-step, k = {k}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    harness.add_common_arguments(parser, "benchmarks/results/allreduce.json")
    args = parser.parse_args(argv)
    samples, rounds = (1024, 2) if args.quick else (8192, args.rounds)
    epochs = 1 + rounds  # one warm-up epoch, then one per round

    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(REPLICAS)])
    if strategy.num_replicas_in_sync != REPLICAS:
        raise RuntimeError(
            f"Expected {REPLICAS} replicas, got {strategy.num_replicas_in_sync}."
        )
    global_micro = PER_REPLICA_MICRO * REPLICAS
    x, y = data(samples)
    dataset = micro_batches(x, y, global_micro)

    trainers, contestants = {}, {}
    for k in KS:
        for name, cls in ((per_update(k), gaviz.AccumulationTrainer),
                          (per_micro_step(k), AllReduceEveryMicroStep)):
            trainer = make_trainer(cls, strategy, k)
            trainers[name] = trainer
            contestants[name] = lambda trainer=trainer: trainer.fit(dataset, epochs=1, verbose=0)
    # The warm-up epoch (tracing), untimed, run here rather than by alternate()
    # so that the weights after it can be compared.
    for epoch in contestants.values():
        epoch()
    first = [max_weight_difference(trainers[per_update(k)].model,
                                   trainers[per_micro_step(k)].model) for k in KS]
    times = harness.alternate(contestants, rounds, warmup=0)

    last, loss_gaps = [], []
    for k in KS:
        a, b = trainers[per_update(k)], trainers[per_micro_step(k)]
        expected = epochs * -(-samples // (global_micro * k))
        for trainer in (a, b):
            if int(trainer.optimizer.iterations.numpy()) != expected:
                raise RuntimeError(
                    f"k = {k}: expected {expected} updates, the optimizer counted "
                    f"{int(trainer.optimizer.iterations.numpy())}."
                )
        last.append(max_weight_difference(a.model, b.model))
        loss_a, loss_b = full_data_loss(a.model, x, y), full_data_loss(b.model, x, y)
        loss_gaps.append(abs(loss_a - loss_b) / loss_a)
    if max(first) > WEIGHT_TOLERANCE or max(loss_gaps) > LOSS_TOLERANCE:
        raise RuntimeError(
            "The two trainers do not compute the same update: largest weight difference "
            f"after one epoch {max(first):.2e} (limit {WEIGHT_TOLERANCE:.0e}), largest "
            f"relative difference of the final loss {max(loss_gaps):.2e} (limit "
            f"{LOSS_TOLERANCE:.0e}); per k, weights: {dict(zip(KS, first))}, losses: "
            f"{dict(zip(KS, loss_gaps))}. A timing of a wrong trainer is worthless."
        )

    update_ms = [harness.median_ms(times[per_update(k)]) for k in KS]
    micro_ms = [harness.median_ms(times[per_micro_step(k)]) for k in KS]
    ratios = [m / u for m, u in zip(micro_ms, update_ms)]
    micro_steps = samples // global_micro
    updates = [-(-micro_steps // k) for k in KS]
    rows = [
        [k, global_micro * k, n, micro_steps, u, m, r]
        for k, n, u, m, r in zip(KS, updates, update_ms, micro_ms, ratios)
    ]
    parameters = sum(
        int(np.prod(v.shape)) for v in trainers[per_update(KS[0])].model.trainable_variables
    )
    notes = [
        f"Exactness: the largest weight difference between the two trainers at the same k "
        f"is {max(first):.1e} after one epoch and {max(last):.1e} after all {epochs} (per k: "
        + "; ".join(f"k = {k}: {before:.0e} then {after:.0e}" for k, before, after in zip(KS, first, last))
        + f"); their final losses differ by at most {max(loss_gaps):.1e} (relative). Same "
        "update, only the order of the float32 additions differs (over micro-steps then "
        "replicas, or the reverse). The rounding differences stay the size of the first "
        "epoch's until a ReLU whose input lies within rounding of zero switches in one "
        "trainer and not the other; that unit's weights then drift further apart. The script "
        f"fails above {WEIGHT_TOLERANCE:.0e} after one epoch or a relative loss difference "
        f"of {LOSS_TOLERANCE:.0e} at the end.",
        f"At k = 1 both trainers all-reduce once per update: their ratio, {ratios[0]:.2f}, is "
        f"the run's noise. For k = " + ", ".join(map(str, KS[1:])) + ", one all-reduce per "
        f"micro-step ({micro_steps} per epoch, against {', '.join(map(str, updates[1:]))}) "
        f"takes " + ", ".join(f"{r:.2f}" for r in ratios[1:]) + " times as long. Each "
        f"all-reduce here sums the model's {parameters} float32 gradients across the two "
        "replicas: a few hundred kilobytes added in memory, so what it costs is mostly the "
        "replicas waiting for each other on two shared cores, which need not be "
        "proportional to the number of all-reduces.",
        "What two logical CPU devices can show: the number of collectives and their fixed "
        "cost (synchronizing the replicas, the extra ops in every micro-step). What they "
        "cannot: both devices share one process, one memory and the same two cores, so an "
        "all-reduce is an add and a local copy. On real accelerators it crosses a link "
        "(PCIe, NVLink, a network), each one moving every gradient, with a latency per "
        "collective: the gap grows with the model size and the slowness of the link, and "
        "only the per-update all-reduce keeps the traffic independent of k.",
    ]
    result = harness.write_result(
        args.json,
        name="allreduce",
        title="4b. One all-reduce per update vs one per micro-step (2 logical CPUs)",
        setup=(
            f"MirroredStrategy on {REPLICAS} logical CPU devices; MLP {FEATURES}-256-256-1, "
            f"{samples} samples, per-replica micro-batch {PER_REPLICA_MICRO} (global "
            f"{global_micro}), SGD learning rate {LR}; model and optimizer built under "
            f"strategy.scope(). All-reduces per epoch: one per update, or one per "
            f"micro-step. Median of {rounds} alternating epochs (all ten trainers in one "
            f"run) after one warm-up."
        ),
        columns=["k", "effective batch", "updates per epoch", "micro-steps per epoch",
                 "per update (ms)", "per micro-step (ms)", "per micro-step / per update"],
        rows=rows,
        notes=notes,
        plot={
            "k": list(KS),
            "per_update_ms": update_ms,
            "per_micro_step_ms": micro_ms,
            "ratio": ratios,
            "max_weight_difference_first_epoch": first,
            "max_weight_difference": last,
            "relative_loss_difference": loss_gaps,
        },
    )
    print(f"{'k':>3} {'per update (ms)':>16} {'per micro-step (ms)':>20} {'ratio':>6} "
          f"{'weight diff':>12}")
    for row, difference in zip(result["rows"], last):
        print(f"{row[0]:>3} {row[4]:>16.1f} {row[5]:>20.1f} {row[6]:>6.2f} {difference:>12.1e}")


if __name__ == "__main__":
    main()
