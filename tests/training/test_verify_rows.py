"""The rows verify reads: a dataset's first rows, read from a copy whose shuffles
draw their own orders, so the dataset's next pass is the one it would have
been (read from the dataset itself, a reshuffling pipeline's next epoch moved
on: fit(verify=True) then trained on other orders than fit())."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from gaviz import _tensorflow
from gaviz.training.verify import rows as verified_rows


def orders(dataset, passes=3):
    return [[batch.numpy().tolist() for batch in dataset] for _ in range(passes)]


def shuffled():
    return tf.data.Dataset.range(12).shuffle(12, seed=3).map(lambda v: 2 * v).batch(4)


def test_reading_rows_leaves_a_reshuffling_datasets_orders_as_they_were():
    expected = orders(shuffled())
    assert expected[0] != expected[1]  # it reshuffles each pass
    dataset = shuffled()
    sample = verified_rows.sample_of(dataset, None, None, rows=6)
    assert sample.x.numpy().tolist() == expected[0][0] + expected[0][1][:2]  # its first pass's
    assert orders(dataset) == expected


def test_planning_reads_the_batch_size_from_the_copy_too():
    """A dataset whose spec does not say its batch size is asked its first element."""
    expected = orders(shuffled())
    dataset = shuffled()
    m, sample = verified_rows.plan(dataset, None, None, None, None, accumulation_steps=2)
    assert m == 2 and len(sample.x) == verified_rows.rows_needed(2, 2)
    assert orders(dataset) == expected


def test_reading_rows_after_some_passes_leaves_the_next_pass_as_it_was():
    expected = orders(shuffled())
    dataset = shuffled()
    orders(dataset, passes=1)
    verified_rows.sample_of(dataset, None, None, rows=6)
    assert orders(dataset, passes=2) == expected[1:]


@pytest.mark.parametrize("make", [
    lambda: tf.data.Dataset.random(seed=4, rerandomize_each_iteration=True).take(8).batch(4),
    lambda: tf.data.Dataset.range(4).interleave(
        lambda i: tf.data.Dataset.range(3 * i, 3 * i + 3).shuffle(3, seed=2), cycle_length=2
    ).shuffle(12, seed=5).batch(4),
    lambda: tf.data.Dataset.from_generator(
        lambda: iter(range(12)), output_signature=tf.TensorSpec([], tf.int64)
    ).shuffle(12, seed=6).batch(4),
], ids=["random", "interleaved shuffles", "a generator, shuffled"])
def test_other_pipelines_that_draw_are_copied_too(make):
    expected = orders(make())
    dataset = make()
    assert orders(_tensorflow.unshared_copy(dataset), passes=1) == expected[:1]
    assert orders(dataset) == expected


def test_a_dataset_it_cannot_copy_is_read_itself_and_said(monkeypatch):
    monkeypatch.setattr(_tensorflow, "unshared_copy", lambda dataset: None)
    with pytest.warns(UserWarning, match="verify read its rows from `x` itself"):
        sample = verified_rows.sample_of(shuffled(), None, None, rows=4)
    assert len(sample.x) == 4


def test_the_rows_of_full_windows_and_the_first_rows():
    x = np.arange(38, dtype="float32")[:, None]
    sample = verified_rows.Sample(x, {"a": x * 2})
    assert verified_rows.full_window_rows(sample, 4, 4) == 32
    first = verified_rows.first_rows(sample, 32)
    assert first.x.shape == (32, 1) and first.y["a"].shape == (32, 1) and first.sample_weight is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert verified_rows.count_rows(first) == 32
