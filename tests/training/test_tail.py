"""What becomes of a partial window at the end of an epoch (gaviz.training.window.tail): the
one place the tail policy decides a window due, closed, an epoch's updates, and
whether an epoch is long enough."""

import pytest
import tensorflow as tf

from gaviz.training.window.tail import POLICIES, Tail


@pytest.mark.parametrize("tail, carried, expected", [
    ("flush", 0, 4), ("drop", 0, 3), ("carry", 0, 3), ("carry", 2, 4), ("carry", 1, 3)])
def test_updates_per_epoch(tail, carried, expected):
    assert Tail(tail).updates_per_epoch(10, 3, carried) == expected
    assert Tail(tail).updates_per_epoch(None, 3, carried) is None


@pytest.mark.parametrize("tail, due", [("flush", [True, True, False]), ("drop", [True, False, False]),
                                       ("carry", [True, False, False])])
def test_a_partial_window_is_due_only_when_flushed_and_not_empty(tail, due):
    cases = [(True, False, 8.0), (False, True, 4.0), (False, True, 0.0)]  # full; tail; empty tail
    got = [bool(Tail(tail).due(tf.constant(full), tf.constant(ended), tf.constant(samples)))
           for full, ended, samples in cases]
    assert got == due


def test_only_carry_keeps_a_window_open():
    assert [Tail(policy).carries for policy in POLICIES] == [False, False, True]
    assert Tail("flush").closes(tf.constant(False)) is True  # no conditional in the graph
    assert not bool(Tail("carry").closes(tf.constant(False)))


def test_an_epoch_shorter_than_a_window_is_refused_by_drop_and_warned_by_carry():
    Tail("flush").check_epoch_length(2, 4)
    with pytest.raises(ValueError, match=r'tail="drop" every window would be dropped'):
        Tail("drop").check_epoch_length(2, 4)
    with pytest.warns(UserWarning, match=r'tail="carry" each window spans epochs'):
        Tail("carry").check_epoch_length(2, 4)
    Tail("drop").check_epoch_length(None, 4)  # unknown length: nothing to say yet
