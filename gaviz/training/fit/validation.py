"""``fit``'s validation data, evaluated with Keras's own ``model.evaluate``."""

from __future__ import annotations

import keras

from gaviz.training.data import data_checks, feeds


class Validation:
    """``validation_data``, evaluated with ``model.evaluate`` every ``freq`` epochs,
    or at the epochs a list ``freq`` holds (``steps`` batches of it, or all of it)."""

    def __init__(self, x, y, sample_weight, batch_size, freq, steps=None):
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.batch_size, self.freq, self.steps = batch_size, freq, steps

    @classmethod
    def make(cls, data, batch_size, freq, steps=None, targets=True, raw=False):
        """None without data; raises ValueError for data of the wrong form (or
        of a dtype Model.fit refuses, before training rather than after an epoch).

        ``targets``: False for a model whose loss its layers add, which
        Keras validates on inputs alone (``x_val`` or ``(x_val,)``) too.
        ``raw``: the data is a KerasHub task's raw data, which the task's own
        ``evaluate`` preprocesses: strings are fine, and inputs alone too
        (its preprocessor may make the targets, as a causal LM's does).
        """
        if data is None:
            return None
        if isinstance(data, feeds.BATCHED):
            return cls(data, None, None, None, freq, steps)  # batched already
        try:
            if not isinstance(data, (tuple, list)):
                if targets and not raw:
                    raise TypeError(type(data).__name__)
                data = (data,)
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(tuple(data))
            if y is None and targets and not raw:
                raise ValueError("no targets")
        except (TypeError, ValueError):
            raise ValueError(
                "`validation_data` must be (x_val, y_val), (x_val, y_val, sample_weight), "
                "a tf.data.Dataset, a keras.utils.PyDataset or a generator. "
                f"Received: {type(data).__name__}"
            ) from None
        for index, arrays in enumerate(() if raw else (x, y, sample_weight)):
            data_checks.check_array_dtypes(f"validation_data[{index}]", arrays)
        return cls(x, y, sample_weight, batch_size, freq, steps)

    def due(self, epoch) -> bool:
        """Whether ``epoch`` (from 1) validates, by Keras's rule."""
        if isinstance(self.freq, list):
            return epoch in self.freq
        return epoch % self.freq == 0

    def run(self, model, callbacks) -> dict:
        logs = model.evaluate(
            self.x, self.y, sample_weight=self.sample_weight, batch_size=self.batch_size,
            steps=self.steps, callbacks=callbacks, return_dict=True,
        )
        return {f"val_{name}": float(value) for name, value in logs.items()}
