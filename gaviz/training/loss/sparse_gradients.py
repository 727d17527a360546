"""Sparse gradients: where a window could still part ways with ``Model.fit``, said once.

An ``Embedding``'s gradient is a ``tf.IndexedSlices``, one row per lookup.
Keras's optimizers transform each row before rows of the same index are
summed (Adam's second moment gets the sum of the squares), so the window
keeps a sparse gradient as its occurrences and hands the optimizer the big
batch's own slices (:mod:`gaviz.training.window.occurrences`): the update is
``Model.fit``'s, under every optimizer.

The trainer finds which variables get sparse gradients by tracing a
micro-step before its window loop is built. Should a micro-step traced later
give a sparse gradient to a variable whose window is a dense sum (a model
whose gradients change kind between traces), its rows are added into that
sum: the textbook gradient, which ``Model.fit`` does not apply for an
optimizer that is not linear in the gradient. That is said here, naming the
variable. (A variable the weight penalty reaches is not one: its penalty's
dense gradient makes ``Model.fit``'s gradient dense too.)
"""

from __future__ import annotations

import warnings

import keras
import tensorflow as tf

from gaviz.training.fit import optimizers

#: Where the docs explain it: the guide page in the repository, and its section.
DOCS = "https://github.com/gaviz/gaviz/blob/main/docs/guide/own_loop.md#sparse-gradients"


def linear_in_gradient(optimizer) -> bool:
    """Whether ``optimizer``'s update is linear in the gradient (so applying a
    sparse gradient's occurrences one by one equals applying their sum):
    plain SGD, with or without momentum, without clipping."""
    return type(optimizers.inner(optimizer)) is keras.optimizers.SGD and not optimizers.clipping(
        optimizer)


def warn_where_densified(optimizer, gradients, windows, variables, expected=frozenset(),
                         stacklevel: int = 2) -> bool:
    """Warns where a sparse gradient meets a window that is a dense sum
    (``windows``: the window's gradients, per variable) for a variable not in
    ``expected`` (by index), under an optimizer that is not linear in the
    gradient; returns whether it warned."""
    names = [_name(v) for i, (g, w, v) in enumerate(zip(gradients, windows, variables))
             if isinstance(g, tf.IndexedSlices) and isinstance(w, tf.Tensor) and i not in expected]
    if not names or linear_in_gradient(optimizer):
        return False
    warnings.warn(
        f"{', '.join(names)} got sparse gradients (tf.IndexedSlices) in a micro-step "
        "traced after the window was made for dense ones: gaviz adds their rows into the "
        "window's dense sum, the textbook big-batch gradient, where Model.fit hands "
        f"{type(optimizers.inner(optimizer)).__name__} each occurrence of a row (its second "
        "moment, or accumulator, gets the sum of squares), so Model.fit lands elsewhere. "
        f"See 'Sparse gradients' in {DOCS}",
        SparseGradientWarning,
        stacklevel=stacklevel + 1,
    )
    return True


class SparseGradientWarning(UserWarning):
    """A sparse gradient was summed densely, where ``Model.fit`` applies its
    occurrences one by one (:mod:`gaviz.training.loss.sparse_gradients`)."""


def _name(variable) -> str:
    return getattr(variable, "path", None) or variable.name
