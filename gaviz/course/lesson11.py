"""Lesson 11's exercise: freeze a model's batch normalization, so that accumulation is exact.

::

    from gaviz.course import lesson11
    lesson11.freeze.check(freeze_batch_normalization)

The learner's ``freeze_batch_normalization(model)`` sets ``trainable = False``
on every BatchNormalization layer, those inside nested models at any depth
included, and leaves the other layers as they were. The check freezes a
fine-tuning model (a "pretrained" block nested in a ``Sequential``, a stem
nested in the block with a Dense frozen beforehand, then a head with its own
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
#: Right answers (the solution, Keras's own walk of the layers) land 3.0e-8 from the big batch
#: (measured); one BatchNormalization left training, whichever, 2.5e-2 to 2.7e-2. 1e-5 is
#: between.
TOLERANCE = 1e-5


#: Layers of the check's model frozen before the learner's function runs (a pretrained stem
#: kept as it was): frozen they stay.
FROZEN_BEFORE = ("stem_dense",)


def _model():
    """A fine-tuning model: a "pretrained" block nested in it, itself holding a nested stem
    (BatchNormalization layers one and two levels down, and a Dense frozen beforehand), then a
    head with a BatchNormalization of its own; the same initial weights every time."""
    keras.utils.set_random_seed(3)
    stem = keras.Sequential([keras.layers.Dense(16, name="stem_dense"),
                             keras.layers.BatchNormalization(name="stem_normalization"),
                             keras.layers.Activation("relu")], name="stem")
    block = keras.Sequential([stem, keras.layers.Dense(16, name="block_dense"),
                              keras.layers.BatchNormalization(name="block_normalization"),
                              keras.layers.Activation("relu")], name="pretrained_block")
    model = keras.Sequential([keras.Input((demo.FEATURES,)), block,
                              keras.layers.Dense(8, name="head_dense"),
                              keras.layers.BatchNormalization(name="head_normalization"),
                              keras.layers.Activation("tanh"),
                              keras.layers.Dense(1, name="output")], name="fine_tuned")
    for layer, _, _ in _layers(model):
        if layer.name in FROZEN_BEFORE:
            layer.trainable = False
    return model


def _layers(model, depth=0):
    """Every layer of ``model``, nested models' layers included: (layer, path, depth), depth 0
    for ``model``'s own layers."""
    found = []
    for layer in model.layers:
        found.append((layer, f"{model.name}/{layer.name}", depth))
        if hasattr(layer, "layers"):
            found += [(inner, f"{model.name}/{path}", below)
                      for inner, path, below in _layers(layer, depth + 1)]
    return found


def _frozen(freeze):
    model = _model()
    freeze(model)
    return model


def _check_structure(model) -> int:
    """Incorrect unless exactly the BatchNormalization layers are frozen; returns their count."""
    layers = _layers(model)
    norms = [(layer, path, depth) for layer, path, depth in layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    dense = [(layer, path) for layer, path, _ in layers if isinstance(layer, keras.layers.Dense)]
    if not model.trainable or not any(layer.trainable for layer, _ in dense):
        raise Incorrect("the whole model is frozen: nothing would train. Freeze only the "
                        "BatchNormalization layers (set `trainable = False` on each of them)")
    thawed = [path for layer, path in dense if layer.name in FROZEN_BEFORE and layer.trainable]
    if thawed:
        raise Incorrect(f"{', '.join(thawed)} was frozen before your function ran, and now "
                        "trains: a model you fine-tune may keep layers frozen on purpose. Set "
                        "`trainable` on the BatchNormalization layers only, and leave every "
                        "other layer as it was")
    wrongly = [path for layer, path in dense
               if layer.name not in FROZEN_BEFORE and not layer.trainable]
    if wrongly:
        raise Incorrect(f"{', '.join(wrongly)} {'is' if len(wrongly) == 1 else 'are'} frozen too: "
                        "freeze only the BatchNormalization layers; the others keep training")
    training = [(path, depth) for layer, path, depth in norms if layer.trainable]
    if len(training) == len(norms):
        raise Incorrect("every BatchNormalization layer still trains: set `layer.trainable = "
                        "False` on each (Keras 3 then runs it on its moving statistics)")
    if training and min(depth for _, depth in training) > 1:
        raise Incorrect(f"{', '.join(path for path, _ in training)} still "
                        f"{'trains' if len(training) == 1 else 'train'}, inside a model inside a "
                        "model: your search looks into nested models one level deep. "
                        "Models nest at any depth (a pretrained base holds blocks of its own): "
                        "call your function on every layer that has `.layers`, so that it looks "
                        "in at every depth")
    paths = ", ".join(path for path, _ in training)
    verb = "trains" if len(training) == 1 else "train"
    if training and max(depth for _, depth in training) == 0:
        raise Incorrect(f"{paths} still {verb}: the model's own layers count too, not only "
                        "those inside nested models")
    if training:
        raise Incorrect(f"{paths} still {verb}: a model's layers can be models of their own (a "
                        "pretrained base inside a Sequential); look inside every layer that "
                        "has `.layers`")
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
    if not difference <= TOLERANCE:
        raise Incorrect(f"one update accumulated over {K} micro-batches differs from the big "
                        f"batch's by {difference:.1e}: a BatchNormalization still normalizes by "
                        "micro-batch statistics")
    return (f"all {frozen} BatchNormalization layers frozen (two inside pretrained_block, one "
            "of them in its stem), the other layers as they were: "
            f"{K} accumulated micro-batches give the big batch's update, to {difference:.0e}")


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
