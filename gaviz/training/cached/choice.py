"""When the trainer makes its windows with the cached window, and how it says so.

``cached_window`` (the trainer's argument): ``"auto"`` (default) uses it
where the compiled loss cannot be summed over micro-batches: a loss whose
value for a row depends on the batch's other rows (the coupling check of
:mod:`gaviz.training.loss.row_losses`), or one that is not one value per row
(a scalar, or its own ``__call__`` reducing otherwise); ``True`` uses it for
any loss; ``False`` never, refusing such a loss by name as before.
"""

from __future__ import annotations

import warnings
from typing import Callable

import tensorflow as tf

from gaviz.training.fit import checks
from gaviz.training.loss.objective import NotPerRow
from gaviz.training.loss.row_losses import CoupledLoss
from gaviz.training.window.rules import EXACT, Rule

#: The values of the trainer's ``cached_window``.
CHOICES = ("auto", True, False)


class CachedWindowUsed(UserWarning):
    """The trainer makes each window with the cached window: the loss couples a
    batch's rows, or is not one value per row (``gaviz.training.cached``)."""


def reason(asked, accumulates: bool, build: Callable[[], None], check: Callable[[], None],
           rule: Rule = EXACT, strategy=None, stacklevel: int = 2) -> str | None:
    """Why the window is cached (a sentence, said once), or None where it sums
    micro-batches.

    Args:
        asked: the trainer's ``cached_window``.
        rule: the trainer's rule (``caches_coupled_loss`` False: a coupled
            loss is summed micro-batch by micro-batch, unchecked: the pitfall).
        strategy: the trainer's (the cached window runs on one replica).
        accumulates: whether a window holds several micro-batches (at one, a
            window is Model.fit's batch, whatever the loss).
        build: resolves the loss per row on a micro-batch (raises
            :class:`~gaviz.training.loss.objective.NotPerRow`).
        check: checks the loss's rows (raises ``CoupledLoss``, or
            ``NotPerRow`` for a ``__call__`` that reduces otherwise).

    Raises:
        CoupledLoss, NotPerRow: with ``cached_window=False``.
        ValueError: the cached window is needed, under several replicas or
            another rule than the exact one.
    """
    if not rule.caches_coupled_loss:
        build()
        return None
    why = "cached_window=True" if asked is True else None
    if why is None:
        try:
            build()
            if accumulates:
                check()
        except (CoupledLoss, NotPerRow) as error:
            if asked is False:
                raise
            why = _why(error)
    if why is not None:
        checks.check_cached_window(strategy or tf.distribute.get_strategy(), rule == EXACT)
        say(why, stacklevel + 1)
    return why


def say(why: str, stacklevel: int = 2) -> None:
    """Says once that the cached window is used, and what it costs."""
    warnings.warn(
        f"gaviz makes each window with the cached window ({why}): each micro-batch runs "
        "forward once without a tape, the compiled loss runs once on the window's outputs "
        "(Model.fit's big batch), then each micro-batch forward and backward again with its "
        "rows of the loss's gradient. One more forward pass per micro-batch, and the window's "
        "micro-batches and outputs held until its end. cached_window=False refuses such a "
        "loss instead.",
        CachedWindowUsed, stacklevel=stacklevel + 1)


def _why(error) -> str:
    if isinstance(error, CoupledLoss):
        return f"`loss` '{error.loss}' couples the batch's rows"
    return f"`loss` {error.what}"
