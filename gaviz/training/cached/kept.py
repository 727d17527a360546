"""A window's micro-batches, kept whole until the window ends: :class:`Kept`.

The cached window computes a loss that couples a batch's rows once on the
whole window, so it keeps each micro-batch (inputs, targets, sample
weights) as it comes, and runs the model on them when the window ends. Each
tensor of a micro-batch's nest goes into a TensorList of its own (a scalar
``variant`` tensor: a graph loop carries it without shape invariants, and a
micro-batch is appended without copying those before it); a ``None`` (no
sample weights) stays a ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf


class Kept(NamedTuple):
    """Micro-batches kept in order, one TensorList per tensor of their nest.

    Attributes:
        lists: per tensor of the micro-batch's nest (flattened, ``None`` left
            out), a TensorList of that tensor, one element per micro-batch.
    """

    lists: list

    @classmethod
    def empty(cls, spec) -> "Kept":
        """No micro-batches yet, of ``spec`` (the micro-batch's nest of ``tf.TensorSpec``)."""
        return cls([_empty_list(s) for s in _tensors(spec)])

    def pushed(self, element) -> "Kept":
        """These micro-batches, then ``element``."""
        return Kept([tf.raw_ops.TensorListPushBack(input_handle=kept, tensor=tensor)
                     for kept, tensor in zip(self.lists, _tensors(element))])

    def count(self):
        """How many micro-batches are kept (an int32 scalar)."""
        if not self.lists:
            return tf.constant(0)
        return tf.raw_ops.TensorListLength(input_handle=self.lists[0])

    def item(self, index, spec):
        """Micro-batch ``index``, in ``spec``'s nest."""
        tensors = iter([get_item(kept, index, s) for kept, s in zip(self.lists, _tensors(spec))])
        return tf.nest.map_structure(lambda s: None if s is None else next(tensors), spec)

    def joined(self, spec):
        """Every kept micro-batch's rows, one after another, in ``spec``'s nest."""
        tensors = iter([concatenated(kept, s) for kept, s in zip(self.lists, _tensors(spec))])
        return tf.nest.map_structure(lambda s: None if s is None else next(tensors), spec)

    def rows(self, spec):
        """Each kept micro-batch's rows (an int64 vector; empty where nothing is kept)."""
        if not self.lists:
            return tf.zeros([0], tf.int64)
        (s, *_) = _tensors(spec)
        return tf.raw_ops.TensorListConcatV2(
            input_handle=self.lists[0], element_dtype=s.dtype, element_shape=_shape(s),
            leading_dims=tf.constant([], tf.int64))[1]

    @classmethod
    def split(cls, joined, rows, spec) -> "Kept":
        """Micro-batches of ``rows`` rows each, cut from ``joined`` (what
        :meth:`joined` gave): a window kept between calls, read back."""
        return cls([tf.raw_ops.TensorListSplit(tensor=tensor, element_shape=_shape(s),
                                               lengths=rows)
                    for tensor, s in zip(_tensors(joined), _tensors(spec))])


def concatenated(kept, spec):
    """The tensors of the TensorList ``kept`` (of ``spec``'s), one after another."""
    return tf.raw_ops.TensorListConcatV2(
        input_handle=kept, element_dtype=spec.dtype, element_shape=_shape(spec),
        leading_dims=tf.constant([], tf.int64))[0]


def reserved(spec, count):
    """A TensorList of ``count`` elements of ``spec``, each set later."""
    return tf.raw_ops.TensorListReserve(element_shape=_shape(spec), num_elements=count,
                                        element_dtype=spec.dtype)


def set_item(kept, index, tensor):
    return tf.raw_ops.TensorListSetItem(input_handle=kept, index=index, item=tensor)


def get_item(kept, index, spec):
    return tf.raw_ops.TensorListGetItem(input_handle=kept, index=index,
                                        element_shape=_shape(spec), element_dtype=spec.dtype)


def spec_of(element):
    """A micro-batch's nest of ``tf.TensorSpec``, its rows unknown (``None`` stays),
    in plain dicts, lists and tuples (as Keras compares structures)."""
    return plain(tf.nest.map_structure(
        lambda t: None if t is None else tf.TensorSpec([None, *t.shape[1:]], t.dtype), element))


def plain(nest):
    """``nest`` with its mappings and sequences as plain ``dict``, ``list`` and ``tuple``
    (a ``tf.Module`` attribute's or a traced function's come as wrappers)."""
    if isinstance(nest, Mapping):
        return {key: plain(value) for key, value in nest.items()}
    if isinstance(nest, tuple) and hasattr(nest, "_fields"):
        return type(nest)(*(plain(value) for value in nest))
    if isinstance(nest, (list, tuple)):
        return (tuple if isinstance(nest, tuple) else list)(plain(value) for value in nest)
    return nest


def _tensors(nest) -> list:
    return [t for t in tf.nest.flatten(nest) if t is not None]


def _empty_list(spec):
    return tf.raw_ops.EmptyTensorList(element_shape=_shape(spec), max_num_elements=-1,
                                      element_dtype=spec.dtype)


def _shape(spec):
    """A TensorList's element shape: ``-1`` where a size is unknown."""
    return tf.constant([-1 if d is None else d for d in spec.shape], tf.int32)
