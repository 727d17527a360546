"""What verify puts back: the variables, attributes, and every global random
state a run draws from (Python's, numpy's, TensorFlow's eager operation seeds
and global Generator, Keras's global SeedGenerator), as they were."""

import random

import keras
import numpy as np
import tensorflow as tf

from gaviz import _keras
from gaviz.training.verify.snapshot import RandomStates, Snapshot


def draws():
    """One number from each global generator, and the order of a shuffle given
    no seed (its seed drawn from TensorFlow's operation seeds)."""
    return (random.random(), float(np.random.random()),
            float(tf.random.get_global_generator().uniform(())),
            float(keras.random.uniform(())),
            list(tf.data.Dataset.range(8).shuffle(8).as_numpy_iterator()))


def test_every_global_random_state_is_put_back():
    keras.utils.set_random_seed(1)  # operation seeds drawn from the global seed
    tf.random.get_global_generator()  # both global generators made before
    keras.random.uniform(())
    states = RandomStates()
    assert states.moved() == []
    expected = draws()
    assert draws() != expected  # the states moved
    assert len(states.moved()) == 2
    states.restore()
    assert draws() == expected


def test_a_keras_global_generator_made_since_is_dropped():
    keras.utils.set_random_seed(2)  # drops Keras's global SeedGenerator
    states = RandomStates()
    first = float(keras.random.uniform(()))  # made now, from Python's state
    assert _keras.global_seed_generator() is not None
    assert states.moved() == ["Keras's global SeedGenerator (keras.random without a seed)"]
    states.restore()
    assert _keras.global_seed_generator() is None
    assert float(keras.random.uniform(())) == first


def test_variables_and_attributes_come_back():
    class Owner:
        size = 3

    owner, variable = Owner(), tf.Variable([1.0, 2.0])
    snapshot = Snapshot([variable, variable], {owner: ("size", "added")})
    variable.assign([5.0, 6.0])
    owner.size, owner.added = 4, True
    np.testing.assert_array_equal(snapshot.start_value(variable), [1.0, 2.0])
    snapshot.restore()
    np.testing.assert_array_equal(variable.numpy(), [1.0, 2.0])
    assert owner.size == 3 and not hasattr(owner, "added")
