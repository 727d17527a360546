"""What a training run reports: one record per optimizer update."""

from __future__ import annotations

from dataclasses import dataclass

import keras


@dataclass(frozen=True)
class Update:
    """One applied optimizer update, as the per-update callback receives it.

    Attributes:
        update: 1-based number of this update in the run (``fit`` call).
        epoch: 1-based epoch in which the update's window ended.
        loss: loss of the update's effective batch, measured with the weights
            before the update (data loss over its samples plus regularization).
        samples: samples (loss elements: rows, or real tokens) in this update's window.
        micro_steps: micro-batches in this update's window (``accumulation_steps``
            except for a partial window).
        samples_seen: samples of all windows applied so far in the run.
        seconds: wall time since the run started (when the graph call that
            applied the update returned).
        accumulation_steps: the window's k (the schedule's value when
            ``accumulation_steps`` is a callable).
    """

    update: int
    epoch: int
    loss: float
    samples: int
    micro_steps: int
    samples_seen: int
    seconds: float
    accumulation_steps: int = 0


class History(keras.callbacks.History):
    """Keras's History of a run, plus one record per optimizer update.

    As ``Model.fit``'s: ``history`` (each logged value per epoch), ``epoch``
    (the epochs run, from 0), ``params`` and ``model``, filled in by ``fit``
    as Keras's own callback. Per update: ``updates``, the :class:`Update`
    records, and one list per field for plotting (``history.loss[i]`` is the
    loss of update ``i + 1``'s effective batch; ``update_epochs[i]`` the epoch,
    from 1, its window ended in). ``len(history)`` counts updates.
    """

    def __init__(self, updates: list[Update] | None = None):
        super().__init__()
        self.epoch: list[int] = []
        self.params: dict = {}
        self.updates: list[Update] = list(updates or [])

    def append(self, update: Update) -> None:
        self.updates.append(update)

    def __len__(self) -> int:
        return len(self.updates)

    def __repr__(self) -> str:
        return f"<gaviz History: {len(self.epoch)} epochs, {len(self.updates)} updates>"

    @property
    def loss(self) -> list[float]:
        return [u.loss for u in self.updates]

    @property
    def update_epochs(self) -> list[int]:
        """The epoch (from 1) of each update."""
        return [u.epoch for u in self.updates]

    @property
    def samples(self) -> list[int]:
        return [u.samples for u in self.updates]

    @property
    def micro_steps(self) -> list[int]:
        return [u.micro_steps for u in self.updates]

    @property
    def samples_seen(self) -> list[int]:
        return [u.samples_seen for u in self.updates]

    @property
    def seconds(self) -> list[float]:
        return [u.seconds for u in self.updates]

    @property
    def accumulation_steps(self) -> list[int]:
        return [u.accumulation_steps for u in self.updates]


class NonFiniteUpdate(FloatingPointError):
    """A window's loss or gradient was not finite, so its update was not applied.

    The weights are those after update ``update - 1`` and the window was
    discarded: the trainer can go on.

    Attributes:
        update: the number the update would have had in its ``fit`` call.
        epoch: the epoch in which its window ended.
        loss: the window's loss (nan or inf, or finite with a non-finite gradient).
        iterations: ``optimizer.iterations`` when it was raised.
    """

    def __init__(self, update: int, epoch: int, loss: float, iterations: int):
        self.update, self.epoch, self.loss, self.iterations = update, epoch, loss, iterations
        super().__init__(
            f"Update {update} (epoch {epoch}) has a non-finite loss or gradient "
            f"(loss={loss}; optimizer.iterations={iterations} before it). It was not "
            f"applied: the weights are those after update {update - 1}, and its window "
            "was discarded. Lower the learning rate or check the data."
        )

    def __reduce__(self):  # picklable, like other exceptions
        return type(self), (self.update, self.epoch, self.loss, self.iterations)


class NonFiniteWindow(NonFiniteUpdate):
    """:class:`gaviz.NonFiniteUpdate` as a :class:`gaviz.Accumulator` raises it: a
    window's gradient was not finite, so it was not applied and was discarded.
    An accumulator knows no epoch and no loss (``epoch`` is None, ``loss``
    nan); ``update`` is ``iterations + 1``.

    Args:
        iterations: ``optimizer.iterations`` when it was refused (None in a
            graph, where the message is an assertion's).
        refused: which windows, as the message says it ("1 window ").
    """

    def __init__(self, iterations, refused: str = "1 window "):
        self.iterations, self.refused = iterations, refused
        self.update = None if iterations is None else iterations + 1
        self.epoch, self.loss = None, float("nan")
        kept = "" if iterations is None else f" (optimizer.iterations={iterations})"
        FloatingPointError.__init__(
            self,
            f"The gradient of {refused}is not finite (nan or inf): not applied, and "
            f"discarded; the model and optimizer keep the update before it{kept}, as "
            "gaviz.NonFiniteUpdate says of the trainer's windows. Lower the learning rate "
            "or check the data.",
        )

    def __reduce__(self):
        return type(self), (self.iterations, self.refused)
