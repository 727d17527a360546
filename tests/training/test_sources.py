"""Where a window's micro-batches come from (gaviz.training.loop.sources), without a model:
each source hands a counting micro-step its elements, in order."""

import numpy as np
import pytest
import tensorflow as tf

from gaviz.training.data import feeds
from gaviz.training.loop import sources


def counting_step(element, sums):
    """Adds the micro-batch's first column and its row count into ``sums``."""
    x = element[0]
    return sums[0] + tf.reduce_sum(x[:, 0]), sums[1] + tf.shape(x, tf.int64)[0]


ZERO = (tf.constant(0.0), tf.constant(0, tf.int64))


def rows(n):
    x = np.arange(n, dtype=np.float32).reshape(n, 1)
    return x, 10 * x


@tf.function
def accumulate(source, sums, steps, k):
    return source.accumulate(counting_step, sums, steps, k)


def test_an_iterator_fills_the_window_then_reports_the_end():
    x, y = rows(10)
    iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
    source = sources.IteratorSource(iterator)
    (total, count), steps, consumed, exhausted = accumulate(source, ZERO, tf.constant(0, tf.int64),
                                                            tf.constant(2, tf.int64))
    assert (float(total), int(count), int(steps), int(consumed), bool(exhausted)) == (28.0, 8, 2, 2, False)
    (total, count), steps, consumed, exhausted = accumulate(source, ZERO, tf.constant(0, tf.int64),
                                                            tf.constant(2, tf.int64))
    # The short last micro-batch (rows 8, 9), then the end of the data.
    assert (float(total), int(count), int(steps), int(consumed), bool(exhausted)) == (17.0, 2, 1, 1, True)


def test_a_window_carried_in_takes_only_what_it_lacks():
    x, y = rows(12)
    iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
    source = sources.IteratorSource(iterator)
    _, steps, consumed, _ = accumulate(source, ZERO, tf.constant(2, tf.int64), tf.constant(3, tf.int64))
    assert (int(steps), int(consumed)) == (3, 1)


@pytest.mark.parametrize("shuffle", [False, True])
def test_arrays_are_cut_in_the_epochs_order_with_a_short_last_micro_batch(shuffle):
    x, y = rows(10)
    np.random.seed(0)
    order = feeds.epoch_order(10, shuffle)
    cursor = tf.Variable(0, dtype=tf.int64)
    source = sources.ArraySource((tf.constant(x), tf.constant(y)), order, cursor, 4, 10)
    seen = []
    for _ in range(2):
        (total, count), steps, consumed, exhausted = accumulate(
            source, ZERO, tf.constant(0, tf.int64), tf.constant(2, tf.int64))
        seen.append((float(total), int(count), int(consumed), bool(exhausted)))
    taken = order.numpy().astype(float)
    assert seen == [(taken[:8].sum(), 8, 2, False), (taken[8:].sum(), 2, 1, True)]
    assert int(cursor.numpy()) == 10
    assert sorted(taken) == list(range(10)) and (list(taken) != list(range(10))) == shuffle


def test_arrays_refuse_mismatched_rows_and_missing_targets():
    with pytest.raises(ValueError, match="same number of rows"):
        feeds.as_arrays(np.zeros((4, 2)), np.zeros((5, 1)), None)
    with pytest.raises(ValueError, match="`y` must be given"):
        feeds.as_arrays(np.zeros((4, 2)), None, None)
    with pytest.raises(ValueError, match="scalar"):
        feeds.as_arrays(np.zeros((4, 2)), 3.0, None)
