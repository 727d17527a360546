"""``fit``'s validation data, evaluated with Keras's own ``model.evaluate``."""

from __future__ import annotations

import keras
import tensorflow as tf


class Validation:
    """``validation_data``, evaluated with ``model.evaluate`` every ``freq`` epochs."""

    def __init__(self, x, y, sample_weight, batch_size, freq):
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.batch_size, self.freq = batch_size, freq

    @classmethod
    def make(cls, data, batch_size, freq):
        """None without data; raises ValueError for data of the wrong form."""
        if data is None:
            return None
        if isinstance(data, tf.data.Dataset):
            return cls(data, None, None, None, freq)
        try:
            if not isinstance(data, (tuple, list)):
                raise TypeError(type(data).__name__)
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(tuple(data))
            if y is None:
                raise ValueError("no targets")
        except (TypeError, ValueError):
            raise ValueError(
                "`validation_data` must be (x_val, y_val), (x_val, y_val, sample_weight) "
                f"or a tf.data.Dataset. Received: {type(data).__name__}"
            ) from None
        return cls(x, y, sample_weight, batch_size, freq)

    def due(self, epoch) -> bool:
        return epoch % self.freq == 0

    def run(self, model, callbacks) -> dict:
        logs = model.evaluate(
            self.x, self.y, sample_weight=self.sample_weight, batch_size=self.batch_size,
            callbacks=callbacks, return_dict=True,
        )
        return {f"val_{name}": float(value) for name, value in logs.items()}
