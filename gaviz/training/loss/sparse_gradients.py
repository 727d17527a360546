"""Sparse gradients: where the exact window and ``Model.fit`` part ways, said once.

An ``Embedding``'s gradient is a ``tf.IndexedSlices``: one row per lookup, a
token that occurs 50 times in a batch has 50 rows. gaviz adds the rows into
the window's dense sum first (``gaviz.training.window.arithmetic.densify``), so the
optimizer sees the textbook gradient of the batch's loss. Keras 3 applies the
slices as they come: Adam's second moment receives ``sum(g_i ** 2)`` over a
row's occurrences where Adam defines ``(sum g_i) ** 2``. One row looked up 50
times with gradient 1 each: Keras's ``v`` after one step is 0.05, Adam's 2.5,
and at learning rate 0.1 the row moves 0.707 instead of 0.1. Frequent
tokens take steps up to sqrt(occurrences) larger, so ``Model.fit``
on the big batch lands elsewhere than the exact window, for every optimizer
whose update is not linear in the gradient. SGD (with momentum or Nesterov,
without clipping) is linear: there the two agree.
"""

from __future__ import annotations

import warnings

import keras
import tensorflow as tf

from gaviz.training.fit import optimizers

#: Where the docs explain it: the guide page in the repository, and its section.
DOCS = "https://github.com/gaviz/gaviz/blob/main/docs/guide/own_loop.md#sparse-gradients"


def sparse_variables(gradients, variables) -> list[str]:
    """The names of the variables whose gradient is a ``tf.IndexedSlices``."""
    return [_name(v) for g, v in zip(gradients, variables) if isinstance(g, tf.IndexedSlices)]


def linear_in_gradient(optimizer) -> bool:
    """Whether ``optimizer``'s update is linear in the gradient (so applying a
    sparse gradient's occurrences one by one equals applying their sum):
    plain SGD, with or without momentum, without clipping."""
    return type(optimizers.inner(optimizer)) is keras.optimizers.SGD and not optimizers.clipping(
        optimizer)


def warn_if_fit_differs(optimizer, gradients, variables, stacklevel: int = 2) -> bool:
    """Warns once where sparse ``gradients`` meet an optimizer that is not
    linear in the gradient; returns whether it warned."""
    names = sparse_variables(gradients, variables)
    if not names or linear_in_gradient(optimizer):
        return False
    inner = optimizers.inner(optimizer)
    warnings.warn(
        f"{', '.join(names)} get{'s' if len(names) == 1 else ''} sparse gradients "
        f"(tf.IndexedSlices, an Embedding's) and {type(inner).__name__} is not linear in "
        "the gradient. gaviz sums each window's gradient first and updates with the "
        "textbook big-batch gradient; Keras's Model.fit on the big batch applies each "
        "occurrence of a row separately (its second moment, or accumulator, gets the sum "
        "of squares, not the square of the sum), so frequent rows move further and "
        "Model.fit lands elsewhere. gaviz's weights equal the big batch's with the "
        f"gradient densified, not Model.fit's. See 'Sparse gradients' in {DOCS}",
        SparseGradientWarning,
        stacklevel=stacklevel + 1,
    )
    return True


class SparseGradientWarning(UserWarning):
    """Sparse gradients meet an optimizer for which ``Model.fit`` differs from
    the exact window (:mod:`gaviz.training.loss.sparse_gradients`)."""


def _name(variable) -> str:
    return getattr(variable, "path", None) or variable.name
