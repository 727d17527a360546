"""The rows a verification trains on: how many, at which micro-batch, read how.

Rows enough for two full windows and a partial one (so a reset between
windows, the tail, schedules, a moving average and ``iterations`` all take
part), at a *scaled* micro-batch of ``ceil(b / k)`` rows by default, so that
Keras's big batch of ``k`` of them is about one micro-batch of the real run:
it fits wherever the run fits.

A dataset's rows are read from a copy of it with shuffles of its own
(``gaviz._tensorflow.unshared_copy``): a ``shuffle(seed=...)`` that reshuffles
each iteration draws its next order from a seed generator shared by every
dataset made from it, so reading the rows from the dataset itself would give
the run after verification another order than the run without it.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from keras import tree

from gaviz import _tensorflow
from gaviz.training.data import feeds
from gaviz.training.fit import checks

#: Full windows a verification trains, before its partial one.
FULL_WINDOWS = 2


class Sample(NamedTuple):
    """The rows a verification trains on: inputs, targets, sample weights."""

    x: object
    y: object = None
    sample_weight: object = None


def verified_micro_batch_size(batch_size: int, accumulation_steps: int) -> int:
    """The scaled micro-batch: ``ceil(b / k)``, so Keras's batch is about ``b``."""
    return max(1, -(-batch_size // accumulation_steps))


def rows_needed(micro_batch_size: int, accumulation_steps: int) -> int:
    """Two full windows and a partial one, its last micro-batch short where it can be."""
    k, m = accumulation_steps, micro_batch_size
    micro_batches = FULL_WINDOWS * k + (max(1, k // 2) if k > 1 else 1)
    return m * (micro_batches - 1) + (m - m // 2)


def plan(x, y, sample_weight, batch_size, micro_batch_size, accumulation_steps):
    """``(micro_batch_size, sample)``: the micro-batch to verify at (by default
    the scaled one of the run's ``batch_size``, or the dataset's, or 32) and the
    rows to verify on. A dataset is read from one copy (its batch size too,
    which may take its first element)."""
    k = accumulation_steps
    read = _readable(x) if isinstance(x, tf.data.Dataset) else x
    if micro_batch_size is None:
        run_batch = batch_size or feeds.batch_size_of(read) or 32
        micro_batch_size = verified_micro_batch_size(run_batch, k)
    m = checks.check_positive_int("micro_batch_size", micro_batch_size)
    return m, _sample(read, y, sample_weight, rows_needed(m, k))


def sample_of(x, y, sample_weight, rows: int) -> Sample:
    """The first ``rows`` rows of ``fit``'s data, as tensors: arrays sliced, a
    ``tf.data.Dataset`` of batches unbatched and read once from a copy (so both
    runs see the same rows whatever it shuffles, and the dataset's own
    shuffling is left as it was; rows of varying widths padded to the longest).

    Raises:
        TypeError: data of another kind (a generator, a PyDataset).
    """
    return _sample(_readable(x) if isinstance(x, tf.data.Dataset) else x, y, sample_weight,
                   rows)


def _sample(x, y, sample_weight, rows: int) -> Sample:
    """:func:`sample_of` of data read as it is (a dataset: already a copy)."""
    if isinstance(x, tf.data.Dataset):
        if y is not None or sample_weight is not None:
            raise ValueError("`y` and `sample_weight` must be None when `x` is a dataset "
                             "(its elements hold them), as in fit.")
        single = x.unbatch()
        # Rows of micro-batches padded each to its own width (padded_batch) are
        # padded again to one width: both runs then read the same arrays.
        varying = any(None in spec.shape.as_list() for spec in
                      tf.nest.flatten(single.element_spec) if spec.shape.rank)
        batched = single.padded_batch(rows) if varying else single.batch(rows)
        rows_read = next(iter(batched.take(1)), None)
        if rows_read is None:
            raise ValueError("`x` is an empty dataset: nothing to verify on.")
        parts = tuple(rows_read) if isinstance(rows_read, tuple) else (rows_read,)
        return Sample(*parts)
    if not _array_like(x):
        raise TypeError(
            "`x` must be arrays (numpy, tensors, dicts or lists of them) or a tf.data.Dataset "
            f"for verify. Received: x of type {type(x).__name__}. Pass a few batches of it as "
            "arrays.")
    return first_rows(Sample(x, y, sample_weight), rows)


def _readable(dataset):
    """``dataset``, or where it can be, a copy whose shuffles draw their own orders."""
    copy = _tensorflow.unshared_copy(dataset)
    if copy is None:
        warnings.warn(
            "verify read its rows from `x` itself (TensorFlow could not copy this dataset): "
            "a dataset that reshuffles each iteration gives the run after verification its "
            "next order, not the one it would have had.", UserWarning, stacklevel=4)
        return dataset
    return copy


def _array_like(x) -> bool:
    leaves = tree.flatten(x)
    return bool(leaves) and all(hasattr(leaf, "shape") and hasattr(leaf, "__getitem__")
                                or isinstance(leaf, (list, tuple)) for leaf in leaves)


def first_rows(sample: Sample, rows: int) -> Sample:
    """The first ``rows`` rows of each part of ``sample``."""
    def first(values):
        return None if values is None else tree.map_structure(lambda a: a[:rows], values)

    return Sample(first(sample.x), first(sample.y), first(sample.sample_weight))


def count_rows(sample: Sample) -> int:
    return int(tree.flatten(sample.x)[0].shape[0])


def full_window_rows(sample: Sample, accumulation_steps: int, micro_batch_size: int) -> int:
    """The rows of ``sample`` in full windows (the partial window's left out)."""
    window = accumulation_steps * micro_batch_size
    return count_rows(sample) // window * window


def terms_of(sample: Sample, rows: int) -> int:
    """Loss terms in one gradient of the big batch: its rows times each row's targets."""
    targets = [t for t in tree.flatten(sample.y) if hasattr(t, "shape")]
    per_row = max([int(np.prod(t.shape[1:])) for t in targets] + [1])
    return max(1, rows * per_row)


def reordered(sample: Sample, block: int) -> Sample:
    """The same rows with each block of ``block`` (one of Model.fit's batches)
    reversed: the same sums, added in another order."""
    rows = count_rows(sample)
    order = np.concatenate([np.arange(start, min(start + block, rows))[::-1]
                            for start in range(0, rows, block)])

    def take(values):
        return None if values is None else tree.map_structure(
            lambda a: tf.gather(tf.convert_to_tensor(a), order), values)

    return Sample(take(sample.x), take(sample.y), take(sample.sample_weight))
