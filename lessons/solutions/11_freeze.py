"""Solution to lesson 11's exercise: freeze every BatchNormalization layer of a model.

A frozen BatchNormalization (``trainable = False``) runs on its moving
statistics in Keras 3, as in inference: each sample's output no longer
depends on its micro-batch, and accumulation is exact again. A model's layers
may be models of their own (a pretrained base inside a ``Sequential``), so
the search goes inside every layer that has layers.
"""

import keras


def freeze_batch_normalization(model):
    """Sets ``trainable = False`` on every BatchNormalization layer of ``model``, nested ones
    included, and leaves every other layer as it was; returns ``model``."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.trainable = False
        elif hasattr(layer, "layers"):  # a model inside the model: look inside it too
            freeze_batch_normalization(layer)
    return model
