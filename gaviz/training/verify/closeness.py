"""When two trainings count as equal: each variable's gap against how far training moved it.

Two trainings that are exact differ only in float rounding: the same sums
added in another order (micro-batches instead of one big batch, oneDNN's
kernels or TensorFlow's own, one thread or many). That rounding is relative:
it grows with the number of terms summed into one gradient and with how far
the weights moved, not with a fixed number of decimals. So the rule for
"equal" is, for each variable ``v``::

    max|a_v - b_v| <= MARGIN * eps * sqrt(terms) * moved_v + ULPS * eps * max|b_v|

where ``moved_v = max|b_v - start_v|`` is how far the reference training moved
it, ``terms`` the loss terms summed into one gradient (rows, or tokens, of
the big batch), and ``eps`` the variable's float type's machine epsilon. The
second term is the rounding of the weights themselves, for a variable that
barely moved. Integer variables (counters, seeds) must be equal.

``MARGIN`` is large because Adam-like optimizers divide by the gradient's own
scale: a gradient that is a near-cancelling sum carries its rounding into a
full-size step. Measured (TensorFlow 2.21, CPU, oneDNN on and off): a router
layer's gate under Adam, 20 terms, 6.5e-05 of its movement; under SGD the same
model stays below 1e-06. The rule allows 5.4e-04 there. A wrong window (a
micro-batch mean, a missing reset, a dropped tail) lands 1e-02 of the movement
away or more.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

#: Relative rounding allowed per sqrt(term), in units of the float type's epsilon.
MARGIN = 2**10
#: The same where the computation rounds in half precision (mixed precision): its
#: epsilon is 2**13 (float16) or 2**16 (bfloat16) times float32's, and dominates
#: whatever an optimizer amplifies. Measured (an MLP, k=4, 64 rows, SGD and
#: Adam): gaviz against Model.fit 1.1e-03 of the movement under mixed_float16,
#: 1.2e-02 under mixed_bfloat16; the rule allows 7.8e-03 and 6.3e-02.
HALF_MARGIN = 1
#: The weights' own rounding allowed, in units of epsilon times their magnitude.
ULPS = 8
#: Machine epsilon of the half-precision types numpy does not know.
_EPSILON = {"bfloat16": 2.0**-7, "float16": 2.0**-10}


class VariableGap(NamedTuple):
    """One variable of two trainings compared; ``equal`` is the rule's verdict."""

    name: str
    gap: float  # max |got - expected|
    moved: float  # max |expected - start|: how far the reference moved it
    allowed: float  # the rule's bound for this variable

    @property
    def equal(self) -> bool:
        return self.gap <= self.allowed

    @property
    def relative(self) -> float:
        """The gap as a fraction of the movement (inf where it did not move but differs)."""
        if self.moved > 0:
            return self.gap / self.moved
        return 0.0 if self.gap == 0 else math.inf


def allowed_gap(moved: float, magnitude: float, terms: int, dtype="float32",
                rounding=None) -> float:
    """The largest gap rounding explains for a variable of ``dtype`` (the
    module's rule), computed in ``rounding`` (default: ``dtype``)."""
    if not _floating(dtype):
        return 0.0
    if terms < 1:
        raise ValueError(f"`terms` must be an integer >= 1. Received: terms={terms}")
    rounding = str(np.dtype(dtype)) if rounding is None else str(rounding)
    margin = HALF_MARGIN if rounding in _EPSILON else MARGIN
    return (margin * _epsilon(rounding) * math.sqrt(terms) * moved
            + ULPS * _epsilon(dtype) * magnitude)


def _floating(dtype) -> bool:
    return str(dtype) in _EPSILON or np.issubdtype(np.dtype(dtype), np.floating)


def _epsilon(dtype) -> float:
    return _EPSILON.get(str(dtype)) or float(np.finfo(dtype).eps)


def variable_gaps(got: Sequence, expected: Sequence, start: Sequence, terms: int,
                  names: Sequence[str] | None = None, rounding=None) -> list[VariableGap]:
    """Each variable's gap between ``got`` and ``expected``, which both began at ``start``.

    Args:
        got, expected, start: the variables' values (arrays, in the same order).
        terms: the loss terms summed into one gradient of the big batch.
        names: the variables' names (default: their positions).
        rounding: the float type whose epsilon the rule uses (default: each
            variable's own); ``"float16"`` for mixed precision, whose
            computation rounds as float16 does though its variables are float32.

    Returns:
        A ``VariableGap`` per variable, largest relative gap first.
    """
    got, expected, start = list(got), list(expected), list(start)
    if not len(got) == len(expected) == len(start):
        raise ValueError("`got`, `expected` and `start` must hold the same variables. Received: "
                         f"{len(got)}, {len(expected)} and {len(start)} values")
    names = list(names) if names is not None else [str(i) for i in range(len(got))]
    gaps = [_gap(name, np.asarray(a), np.asarray(b), np.asarray(s), terms, rounding)
            for name, a, b, s in zip(names, got, expected, start)]
    return sorted(gaps, key=lambda g: (g.equal, -g.relative))


def _gap(name: str, got: np.ndarray, expected: np.ndarray, start: np.ndarray,
         terms: int, rounding=None) -> VariableGap:
    if got.shape != expected.shape:
        raise ValueError(f"variable {name!r} has shape {got.shape} against {expected.shape}")
    wide = np.float64
    gap = float(np.max(np.abs(got.astype(wide) - expected.astype(wide)), initial=0.0))
    moved = float(np.max(np.abs(expected.astype(wide) - start.astype(wide)), initial=0.0))
    magnitude = float(np.max(np.abs(expected.astype(wide)), initial=0.0))
    return VariableGap(name, gap, moved,
                       allowed_gap(moved, magnitude, terms, expected.dtype, rounding))
