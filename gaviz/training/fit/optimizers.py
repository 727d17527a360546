"""What gaviz asks of a Keras optimizer, asked in one place: the optimizer a
loss scale wraps, whether it scales the loss, and how it clips."""

from __future__ import annotations

import keras

#: Keras's clipping arguments, each of which an optimizer applies to what it is given.
CLIPPING = ("clipnorm", "clipvalue", "global_clipnorm")


def inner(optimizer):
    """The optimizer a ``LossScaleOptimizer`` wraps (or ``optimizer`` itself)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def loss_scaled(optimizer) -> bool:
    """Whether ``optimizer`` scales the loss (a ``LossScaleOptimizer``): it may
    skip an update whose scaled gradient overflowed, and lowers its scale."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def clipping(optimizer) -> list[str]:
    """The clipping arguments ``optimizer`` (or the one it wraps) was given."""
    wrapped = inner(optimizer)
    return [name for name in CLIPPING if getattr(wrapped, name, None) is not None]
