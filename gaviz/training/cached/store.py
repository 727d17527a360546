"""A cached window carried into the next call (``tail="carry"``): :class:`KeptStore`.

A cached window holds micro-batches, not sums, so a window open at the end
of an epoch is kept as its micro-batches: each tensor's rows, one after
another, in a variable whose number of rows changes, and each micro-batch's
rows. The next call reads them back into the window's lists and goes on.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz.training.cached.kept import Kept, concatenated


class KeptStore(tf.Module):
    """The micro-batches of a window carried into the next call.

    Args:
        spec: a micro-batch's ``(x, y, sample_weight)`` of ``tf.TensorSpec``.
        window: the class of a cached window's micro-batches (its fields: the
            parts of ``spec``).
    """

    def __init__(self, spec, window):
        super().__init__(name="kept_window")
        self.spec, self.window = spec, window
        self.parts = [[_rows_variable(s, f"{name}_{i}") for i, s in enumerate(_tensors(part))]
                      for name, part in zip(window._fields, spec)]
        self.rows = tf.Variable(tf.zeros([0], tf.int64), shape=tf.TensorShape([None]),
                                trainable=False, name="rows")

    @property
    def micro_steps(self):
        """Micro-batches kept (an int64 scalar)."""
        return tf.shape(self.rows.read_value(), out_type=tf.int64)[0]

    def read(self):
        """The kept micro-batches, as a window's lists."""
        rows = self.rows.read_value()
        return self.window(*(Kept.split([v.read_value() for v in part], rows, _tensors(spec))
                             for part, spec in zip(self.parts, self.spec)))

    def write(self, window) -> None:
        """Keeps ``window``'s micro-batches (replacing what was kept)."""
        for part, kept, spec in zip(self.parts, window, self.spec):
            for variable, kept_list, s in zip(part, kept.lists, _tensors(spec)):
                variable.assign(concatenated(kept_list, s))
        self.rows.assign(window.x.rows(self.spec[0]))


def _tensors(nest) -> list:
    return [t for t in tf.nest.flatten(nest) if t is not None]


def _rows_variable(spec, name):
    shape = tf.TensorShape([None, *spec.shape[1:]])
    return tf.Variable(tf.zeros([0, *[d or 0 for d in spec.shape[1:]]], spec.dtype), shape=shape,
                       trainable=False, name=name)
