"""4. Scaling with k: epoch time and final loss, at a fixed effective batch or micro-batch.

The MLP of bench_dispatch (64-256-256-1, SGD, learning rate 0.01), one
gaviz trainer per configuration, each on a fresh model with the same initial
weights, all trained on the same data in the same order:

- series A, fixed effective batch 256: k in 1 2 4 8 16 32, micro-batch
  256 / k. Every configuration applies the same updates, so the final losses
  must agree up to float rounding; only the time may change, and it grows
  with k because the same arithmetic is cut into more, smaller pieces.
- series B, fixed micro-batch 32: k in 1 2 4 8 16 32, effective batch 32 k.
  The micro-steps are the same for every k; the updates are k times fewer,
  so the time falls with k (each update costs a graph call from Python and
  an optimizer step), and the loss after the same number of epochs rises
  with k, at the same learning rate.

All twelve configurations are contestants in one alternating run (so both
series see the same machine); every one trains the same number of epochs
(one warm-up plus the timed rounds), then its loss is measured on the whole
data set with one forward pass.

    python benchmarks/bench_scaling.py [--rounds 21] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse

import harness  # first: quiets TensorFlow before it is imported
import keras
import numpy as np
from bench_dispatch import (
    FEATURES,
    LR,
    data,
    full_data_loss,
    make_model,
    max_weight_difference,
    micro_batches,
)

import gaviz

KS = (1, 2, 4, 8, 16, 32)
EFFECTIVE = 256  # series A: micro-batch = EFFECTIVE // k
MICRO = 32  # series B: effective batch = MICRO * k
FIXED_EFFECTIVE = "fixed effective batch"
FIXED_MICRO = "fixed micro-batch"


def configurations():
    """``(series, k, micro-batch, effective batch)`` for both series."""
    series_a = [(FIXED_EFFECTIVE, k, EFFECTIVE // k, EFFECTIVE) for k in KS]
    series_b = [(FIXED_MICRO, k, MICRO, MICRO * k) for k in KS]
    return series_a + series_b


def trainer_and_epoch(x, y, k, micro):
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), "mse", k)
    dataset = micro_batches(x, y, micro)
    return trainer, lambda: trainer.fit(dataset, epochs=1, verbose=0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    harness.add_common_arguments(parser, "benchmarks/results/scaling.json")
    args = parser.parse_args(argv)
    samples, rounds = (1024, 2) if args.quick else (8192, args.rounds)
    epochs = 1 + rounds  # one warm-up epoch, then one per round

    x, y = data(samples)
    initial_loss = full_data_loss(make_model(), x, y)
    configs = configurations()
    trainers, contestants = {}, {}
    for config in configs:
        trainers[config], contestants[config] = trainer_and_epoch(x, y, config[1], config[2])
    # The warm-up epoch (tracing), untimed, run here rather than by alternate()
    # so that the weights after it can be compared.
    for config in configs:
        contestants[config]()
    a = [c for c in configs if c[0] == FIXED_EFFECTIVE]
    b = [c for c in configs if c[0] == FIXED_MICRO]
    a_weights_first = max(
        max_weight_difference(trainers[c].model, trainers[a[0]].model) for c in a[1:]
    )
    # One dict, so the twelve take turns in one run.
    times = harness.alternate({str(c): contestants[c] for c in configs}, rounds, warmup=0)

    rows, losses = [], {}
    for config in configs:
        series, k, micro, effective = config
        trainer = trainers[config]
        if int(trainer.optimizer.iterations.numpy()) != epochs * (samples // effective):
            raise RuntimeError(
                f"{config}: expected {epochs * (samples // effective)} updates, the optimizer "
                f"counted {int(trainer.optimizer.iterations.numpy())}."
            )
        losses[config] = full_data_loss(trainer.model, x, y)
        rows.append([series, k, micro, effective, harness.median_ms(times[str(config)]),
                     losses[config]])

    a_losses = [losses[c] for c in a]
    spread = (max(a_losses) - min(a_losses)) / float(np.mean(a_losses))
    a_weights = max(max_weight_difference(trainers[c].model, trainers[a[0]].model) for c in a[1:])
    b_losses = [losses[c] for c in b]
    rising = all(u < v for u, v in zip(b_losses, b_losses[1:]))
    b_ms = [harness.median_ms(times[str(c)]) for c in b]
    b_updates = [samples // c[3] for c in b]  # per epoch
    per_update_ms = (b_ms[0] - b_ms[-1]) / (b_updates[0] - b_updates[-1])
    a_ms = [harness.median_ms(times[str(c)]) for c in a]
    # Series A's k = 8 and series B's k = 8 are the same configuration (micro-batch
    # 32, effective batch 256), timed as two contestants: their gap is this run's noise.
    twin_a = next(c for c in a if c[2] == MICRO)
    twin_b = next(c for c in b if c[3] == EFFECTIVE)
    twin_ms = harness.median_ms(times[str(twin_a)]), harness.median_ms(times[str(twin_b)])

    notes = [
        f"Exactness (series A): after {epochs} epochs ({epochs * (samples // EFFECTIVE)} "
        f"updates each), the final losses for k = {', '.join(map(str, KS))} span "
        f"{min(a_losses):.9f} to {max(a_losses):.9f}, a largest relative spread of "
        f"{spread:.1e}; the largest weight difference from k = 1 is {a_weights_first:.1e} after "
        f"one epoch and {a_weights:.1e} after {epochs}. Same updates on the same data: only "
        "the order of the float32 additions differs. Those rounding differences stay the "
        "size of the first epoch's until a ReLU whose input lies within rounding of zero "
        "switches in one run and not the other; that unit's weights then drift further "
        "apart (the loss hardly notices).",
        f"Time (series A): the arithmetic is the same for every k, cut into micro-batches "
        f"of {EFFECTIVE // KS[0]} down to {EFFECTIVE // KS[-1]}; an epoch takes "
        f"{a_ms[0]:.0f} ms at k = {KS[0]} and {a_ms[-1]:.0f} ms at k = {KS[-1]} "
        f"({a_ms[-1] / a_ms[0]:.1f}x): small micro-batches use the cores less well and "
        "each micro-step has a fixed cost (next element, loop iteration, small kernels). "
        "That is the price of accumulation when the batch would have fitted.",
        f"Loss (series B): after the same {epochs} epochs the loss "
        f"{'rises with k' if rising else 'does not rise steadily with k'}, from "
        f"{b_losses[0]:.3f} at k = {KS[0]} ({epochs * (samples // (MICRO * KS[0]))} updates) "
        f"to {b_losses[-1]:.3f} at k = {KS[-1]} ({epochs * (samples // (MICRO * KS[-1]))} "
        f"updates); the untrained model's loss is {initial_loss:.3f}. Same learning rate, "
        "k times fewer updates per epoch: a larger effective batch needs a larger learning "
        "rate or more epochs to go as far (the targets are random noise, so every drop "
        "below their variance, about 1, is memorization: a pure count of optimization "
        "progress).",
        f"Time (series B): the micro-steps are the same for every k, the updates are not: "
        f"{b_updates[0]} per epoch at k = {KS[0]}, {b_updates[-1]} at k = {KS[-1]}. An epoch "
        f"takes {b_ms[0]:.0f} ms at k = {KS[0]} and {b_ms[-1]:.0f} ms at k = {KS[-1]}, about "
        f"{per_update_ms:.2f} ms per update saved (a graph call from Python, an optimizer "
        "step, the reading of the window's results): accumulation at a fixed micro-batch "
        "costs no time, it saves some.",
        f"Noise: k = 8 with micro-batch {MICRO} is in both series, timed as two "
        f"contestants: {twin_ms[0]:.0f} and {twin_ms[1]:.0f} ms.",
    ]
    result = harness.write_result(
        args.json,
        name="scaling",
        title="4. Scaling with k",
        setup=(
            f"MLP {FEATURES}-256-256-1, {samples} samples (random targets), SGD learning rate "
            f"{LR}, one gaviz trainer per row from the same initial weights; series A: "
            f"effective batch {EFFECTIVE}, micro-batch {EFFECTIVE} / k; series B: micro-batch "
            f"{MICRO}, effective batch {MICRO} k. Median of {rounds} alternating epochs (all "
            f"twelve rows in one run) after one warm-up; final loss: mean squared error on "
            f"all samples after those {epochs} epochs."
        ),
        columns=["series", "k", "micro-batch", "effective batch", "median epoch (ms)",
                 "final loss"],
        rows=rows,
        notes=notes,
        plot={
            "fixed_effective": {
                "k": list(KS),
                "micro_batch": [c[2] for c in a],
                "ms": a_ms,
                "loss": a_losses,
                "relative_loss_spread": spread,
                "max_weight_difference_first_epoch": a_weights_first,
                "max_weight_difference": a_weights,
            },
            "fixed_micro": {
                "k": list(KS),
                "effective_batch": [c[3] for c in b],
                "ms": b_ms,
                "loss": b_losses,
                "loss_rises_with_k": rising,
            },
            "epochs": epochs,
            "initial_loss": initial_loss,
        },
    )
    print(f"{'series':<22} {'k':>3} {'micro':>6} {'effective':>9} {'epoch (ms)':>11} "
          f"{'final loss':>11}")
    for row in result["rows"]:
        print(f"{row[0]:<22} {row[1]:>3} {row[2]:>6} {row[3]:>9} {row[4]:>11.1f} {row[5]:>11.6f}")
    print(f"series A: relative spread of final losses {spread:.1e}, largest weight "
          f"difference from k = 1 {a_weights_first:.1e} after one epoch, {a_weights:.1e} "
          f"after {epochs}")


if __name__ == "__main__":
    main()
