"""What the cached window's second pass must not change: random draws and layers' state.

The second pass runs each micro-batch through the model again, with a tape.
Its gradient is the gradient of the loss the first pass computed only if the
model computes the same outputs: each random layer (Dropout...) must draw the
same masks, so its seed state (a ``SeedGenerator``'s variable) is put back to
what it was before that micro-batch's first pass. And a layer that updates
its own state in training (BatchNormalization's moving statistics) must
update it once per micro-batch, as the plain window does, not twice: its
variables are put back after the second pass to what the first left.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from gaviz.training.fit.batch_layers import seed_state


class StateVariables(NamedTuple):
    """A model's non-trainable variables a forward pass in training may change."""

    seeds: list  #: random layers' seed states
    others: list  #: the rest (moving statistics, counters)

    @classmethod
    def of(cls, model) -> "StateVariables":
        variables = model.non_trainable_variables
        return cls([v for v in variables if seed_state(v)],
                   [v for v in variables if not seed_state(v)])

    def read(self) -> list:
        """Every one's value now (seeds first): tensors, not the variables."""
        return [tf.convert_to_tensor(v) for v in self.seeds + self.others]

    def seeds_now(self) -> list:
        return [tf.convert_to_tensor(v) for v in self.seeds]

    def put_seeds(self, values) -> list:
        """The seed states set to ``values``; returns the assign ops."""
        return [v.assign(value) for v, value in zip(self.seeds, values)]

    def put_back(self, values) -> list:
        """Every one set back to ``values`` (what :meth:`read` gave); the assign ops."""
        return [v.assign(value) for v, value in zip(self.seeds + self.others, values)]
