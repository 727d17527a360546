"""Lesson 11's exercise: freeze a model's batch normalization, so that accumulation is exact.

::

    from gaviz.course import lesson11
    lesson11.freeze.check(freeze_batch_normalization)

The learner's ``freeze_batch_normalization(model)`` sets ``trainable = False``
on every BatchNormalization layer, those inside nested models included, and
leaves the other layers trainable. The check freezes a fine-tuning model (a
"pretrained" block nested in a ``Sequential``, then a head with its own
BatchNormalization) and trains it one update through gaviz's trainer (k = 4
micro-batches of 16) and through ``Model.fit`` on the batch of 64.
"""

from __future__ import annotations

import keras

from gaviz import demo
from gaviz.course.exercise import Exercise, Incorrect
from gaviz.course.loop import max_difference
from gaviz.course.repairs import require_attempted
from gaviz.training import AccumulationTrainer

K, MICRO_BATCH_SIZE = 4, 16
TOLERANCE = 1e-5


def _model():
    """A fine-tuning model: a nested "pretrained" block with a BatchNormalization, then a head
    with one of its own; the same initial weights every time."""
    keras.utils.set_random_seed(3)
    block = keras.Sequential([keras.layers.Dense(16, name="block_dense"),
                              keras.layers.BatchNormalization(name="block_normalization"),
                              keras.layers.Activation("relu")], name="pretrained_block")
    return keras.Sequential([keras.Input((demo.FEATURES,)), block,
                             keras.layers.Dense(8, name="head_dense"),
                             keras.layers.BatchNormalization(name="head_normalization"),
                             keras.layers.Activation("tanh"), keras.layers.Dense(1, name="output")],
                            name="fine_tuned")


def _layers(model):
    """Every layer of ``model``, nested models' layers included: (layer, path) pairs."""
    found = []
    for layer in model.layers:
        found.append((layer, f"{model.name}/{layer.name}"))
        if hasattr(layer, "layers"):
            found += [(inner, f"{model.name}/{path}") for inner, path in _layers(layer)]
    return found


def _frozen(freeze):
    model = _model()
    freeze(model)
    return model


def _check_structure(model) -> int:
    """Incorrect unless exactly the BatchNormalization layers are frozen; returns their count."""
    layers = _layers(model)
    norms = [(layer, path) for layer, path in layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    dense = [(layer, path) for layer, path in layers if isinstance(layer, keras.layers.Dense)]
    if not model.trainable or not any(layer.trainable for layer, _ in dense):
        raise Incorrect("the whole model is frozen: nothing would train. Freeze only the "
                        "BatchNormalization layers (set `trainable = False` on each of them)")
    wrongly = [path for layer, path in dense if not layer.trainable]
    if wrongly:
        raise Incorrect(f"{', '.join(wrongly)} {'is' if len(wrongly) == 1 else 'are'} frozen too: "
                        "freeze only the BatchNormalization layers; the others keep training")
    training = [path for layer, path in norms if layer.trainable]
    if len(training) == len(norms):
        raise Incorrect("every BatchNormalization layer still trains: set `layer.trainable = "
                        "False` on each (Keras 3 then runs it on its moving statistics)")
    if training:
        raise Incorrect(f"{', '.join(training)} still trains: a model's layers can be models of "
                        "their own (a pretrained base inside a Sequential); look inside every "
                        "layer that has `.layers`")
    return len(norms)


def _check_freeze(freeze) -> str:
    require_attempted(freeze, "freeze_batch_normalization does nothing yet")
    frozen = _check_structure(_frozen(freeze))
    x, y = demo.make_data(K * MICRO_BATCH_SIZE, seed=3)
    accumulated, big = _frozen(freeze), _frozen(freeze)
    for model in (accumulated, big):
        model.compile(keras.optimizers.SGD(0.1), "mse")
    AccumulationTrainer(accumulated, accumulation_steps=K).fit(
        x, y, batch_size=MICRO_BATCH_SIZE, shuffle=False, verbose=0)
    big.fit(x, y, batch_size=K * MICRO_BATCH_SIZE, shuffle=False, verbose=0)
    difference = max_difference(accumulated, big)
    if difference > TOLERANCE:
        raise Incorrect(f"one update accumulated over {K} micro-batches differs from the big "
                        f"batch's by {difference:.1e}: a BatchNormalization still normalizes by "
                        "micro-batch statistics")
    return (f"all {frozen} BatchNormalization layers frozen (one inside pretrained_block), the "
            f"Dense layers still training: {K} accumulated micro-batches give the big batch's "
            f"update, to {difference:.0e}")


freeze = Exercise(
    "11 freeze the batch normalization",
    _check_freeze,
    hints=[
        "Loop over `model.layers`; `isinstance(layer, keras.layers.BatchNormalization)` finds "
        "them, and `layer.trainable = False` freezes one.",
        "A layer can be a model of its own (`hasattr(layer, 'layers')`): call your function on "
        "it too, so that the search reaches nested BatchNormalization layers.",
    ],
    solution_file="11_freeze.py",
)
