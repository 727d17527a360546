"""Putting everything back after a verification: the variables' values, Python
attributes, and every random state a run draws from, so that the run after
``verify`` is the run without it, bit for bit.

The random states: Python's ``random``, numpy's global generator,
TensorFlow's sequence of eager operation seeds (a ``Dataset.shuffle`` given
no seed draws its seed from it), TensorFlow's global ``tf.random.Generator``
and Keras's global ``SeedGenerator`` (``keras.random``'s draws without a
seed); a layer's own
``SeedGenerator`` (Dropout's) is one of the model's variables, put back with
them. A dataset's shuffling is not touched at all: verify reads its rows from
a copy (:mod:`gaviz.training.verify.rows`).
"""

from __future__ import annotations

import random

import numpy as np

from gaviz import _keras, _tensorflow

_MISSING = object()


class RandomStates:
    """The global random states, as they were when made."""

    def __init__(self):
        self.python = random.getstate()
        self.numpy = np.random.get_state()
        self.operation_seeds = _tensorflow.operation_seeds()
        self.tensorflow = _tensorflow.global_generator()
        self.tensorflow_state = (None if self.tensorflow is None
                                 else np.array(self.tensorflow.state.numpy()))
        self.keras = _keras.global_seed_generator()
        self.keras_state = None if self.keras is None else np.array(self.keras.state.numpy())

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        _tensorflow.set_operation_seeds(self.operation_seeds)
        if self.tensorflow is not None:
            self.tensorflow.reset(self.tensorflow_state)
        # A generator made since (a draw without a seed) is dropped: the next
        # draw makes it again, from Python's state, as it would have.
        _keras.set_global_seed_generator(self.keras)
        if self.keras is not None:
            self.keras.state.assign(self.keras_state)

    def moved(self) -> list[str]:
        """The global generators a run drew from since (by name)."""
        moved = []
        tensorflow = _tensorflow.global_generator()
        if tensorflow is not None and (tensorflow is not self.tensorflow or not np.array_equal(
                tensorflow.state.numpy(), self.tensorflow_state)):
            moved.append("TensorFlow's global tf.random.Generator")
        keras = _keras.global_seed_generator()
        if keras is not None and (keras is not self.keras or not np.array_equal(
                keras.state.numpy(), self.keras_state)):
            moved.append("Keras's global SeedGenerator (keras.random without a seed)")
        return moved


class Snapshot:
    """Values of variables and Python attributes, and the random states, to put back."""

    def __init__(self, variables, attributes: dict, randomness: RandomStates | None = None):
        seen, self.variables = set(), []
        for variable in variables:
            if id(variable) not in seen:
                seen.add(id(variable))
                self.variables.append(variable)
        self.values = [np.array(v.numpy()) for v in self.variables]
        self.by_id = {id(v): value for v, value in zip(self.variables, self.values)}
        self.attributes = {(id(owner), name): (owner, name, getattr(owner, name, _MISSING))
                           for owner, names in attributes.items() for name in names}
        self.random = randomness or RandomStates()

    def start_value(self, variable):
        """``variable``'s value when the snapshot was made."""
        return self.by_id[id(variable)]

    def restore_values(self) -> None:
        """The variables and random states (not the attributes: graph functions
        made anew between runs stay)."""
        for variable, value in zip(self.variables, self.values):
            variable.assign(value)
        self.random.restore()

    def restore(self) -> None:
        self.restore_values()
        for owner, name, value in self.attributes.values():
            if value is _MISSING:
                if hasattr(owner, name):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)
