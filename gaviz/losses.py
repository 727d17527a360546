"""Turning what users pass as ``loss`` into a per-sample loss function.

Accumulation needs losses before any reduction: the trainer sums them over
the whole window and divides once, by the window's sample count. A Keras
``Loss`` object reduces in ``__call__``; its ``call`` method returns the
unreduced values, so that is what we use.
"""

from __future__ import annotations

import keras


def per_sample_loss(loss):
    """Returns ``fn(y_true, y_pred) -> per-sample losses`` for ``loss``.

    Args:
        loss: a ``keras.losses.Loss`` instance, a Keras loss name (``"mse"``,
            ``"sparse_categorical_crossentropy"``...), or a callable
            ``(y_true, y_pred)`` returning one loss per sample (shape
            ``(batch, ...)``, not reduced to a scalar).

    Raises:
        ValueError: ``loss`` is a string Keras does not know.
        TypeError: ``loss`` is neither a string nor callable.
    """
    if isinstance(loss, str):
        try:
            loss = keras.losses.get(loss)
        except ValueError as error:
            raise ValueError(
                f"`loss` must be a Keras loss name, a keras.losses.Loss or a callable "
                f"returning per-sample losses. Received: loss={loss!r} ({error})"
            ) from None
    if isinstance(loss, keras.losses.Loss):
        return loss.call
    if callable(loss):
        return loss
    raise TypeError(
        "`loss` must be a Keras loss name, a keras.losses.Loss or a callable returning "
        f"per-sample losses. Received: loss={loss!r} of type {type(loss).__name__}"
    )
