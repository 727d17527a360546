"""2. Compute-bound: a small convolutional network on 32x32 images.

Here arithmetic, not dispatch, decides the time, so accumulation should
cost almost nothing: the same convolutions run on 8 micro-batches of 32
instead of one batch of 256, plus one running sum per weight. The three
contestants train the same network on the same images, one epoch each:
gaviz with k = 8 and micro-batch 32, gaviz with k = 1 on batches of 256
(plain big-batch training through the same trainer), both given the
arrays, and Keras's own ``Model.fit`` at batch 256.

    python benchmarks/bench_compute.py [--rounds 7] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse

import harness
import keras
import numpy as np

import gaviz

SIZE, CLASSES, MICRO, K, LR = 32, 10, 32, 8, 0.01
LOSS = "sparse_categorical_crossentropy"


def make_model():
    keras.utils.set_random_seed(0)
    conv = dict(kernel_size=3, padding="same", activation="relu")
    return keras.Sequential(
        [
            keras.Input((SIZE, SIZE, 3)),
            keras.layers.Conv2D(32, **conv),
            keras.layers.Conv2D(32, **conv),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, **conv),
            keras.layers.Conv2D(64, **conv),
            keras.layers.MaxPooling2D(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )


def images(samples):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, SIZE, SIZE, 3)).astype("float32")
    y = rng.integers(0, CLASSES, size=(samples,)).astype("int32")
    return x, y


def gaviz_epoch(x, y, micro, k):
    # Arrays, cut in the graph: on a 2-core CPU machine an epoch of a tf.data
    # pipeline of these images sometimes takes a fixed 2.55 s, whoever consumes
    # it (gaviz or Keras, 32 or 256 per batch), which would decide the comparison.
    trainer = gaviz.AccumulationTrainer(make_model(), keras.optimizers.SGD(LR), LOSS, k)
    return lambda: trainer.fit(x, y, batch_size=micro, epochs=1, shuffle=False, verbose=0)


def keras_epoch(x, y, batch):
    model = make_model()
    model.compile(keras.optimizers.SGD(LR), LOSS)
    return lambda: model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)


ACCUMULATED = f"gaviz, micro-batch {MICRO} x k = {K}"
PLAIN = f"gaviz, k = 1, batch {MICRO * K}"
KERAS = f"Keras Model.fit, batch {MICRO * K}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    harness.add_common_arguments(parser, "benchmarks/results/compute.json")
    args = parser.parse_args(argv)
    samples, rounds = (512, 2) if args.quick else (2048, args.rounds)

    x, y = images(samples)
    contestants = {
        ACCUMULATED: gaviz_epoch(x, y, MICRO, K),
        PLAIN: gaviz_epoch(x, y, MICRO * K, 1),
        KERAS: keras_epoch(x, y, MICRO * K),
    }
    times = harness.alternate(contestants, rounds)
    base = harness.median_ms(times[PLAIN])
    rows = [[name, harness.median_ms(t), harness.median_ms(t) / base] for name, t in times.items()]
    overhead = harness.median_ms(times[ACCUMULATED]) / base - 1
    params = make_model().count_params()
    result = harness.write_result(
        args.json,
        name="compute",
        title="2. Compute-bound: a small CNN on 32x32 images, one epoch",
        setup=(
            f"CNN conv 32-32-pool-64-64-pool-GAP-dense ({params:,} weights), {samples} random "
            f"32x32x3 images, 10 classes, SGD; median of {rounds} alternating epochs after "
            "one warm-up."
        ),
        columns=["trainer", "median epoch (ms)", "time / gaviz at batch 256"],
        rows=rows,
        targets=[
            harness.target("accumulation's extra time over the plain big batch", overhead * 100,
                           10.0, "%", at_least=False)
        ],
        plot={"labels": ["gaviz 32 x 8", "gaviz 256 x 1", "Keras fit 256"],
              "ms": [r[1] for r in rows]},
    )
    for row in result["rows"]:
        print(f"{row[0]:<40} {row[1]:8.1f} ms {row[2]:6.2f}x")


if __name__ == "__main__":
    main()
