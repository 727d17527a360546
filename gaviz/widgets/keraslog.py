"""What Keras tells its callbacks during ``fit``, kept as plain records for plotting.

In Keras 3, ``on_train_batch_end(batch, logs)`` receives in ``logs["loss"]``
the mean of the loss over the epoch's batches so far (weighted by batch size,
reset at each epoch: the number the progress bar shows), not the loss of that
batch. ``on_epoch_end(epoch, logs)`` receives the epoch's value, and ``val_*``
with validation. Keras tells callbacks neither the batch size nor the samples
seen, so these records count training steps: calls of ``on_train_batch_end``
(one batch, and one optimizer update, each in plain Keras; ``batch`` jumps by
``steps_per_execution`` when that is above one).

Nothing here imports Keras, widgets or matplotlib: a test can fill a
:class:`KerasLog` by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple


class BatchLog(NamedTuple):
    """One ``on_train_batch_end`` call.

    Attributes:
        step: 1-based training step in this log, counted over every epoch and
            every ``fit`` it recorded: ``batch + 1`` plus the steps of the
            epochs before.
        epoch: 1-based epoch (Keras's 0-based ``epoch`` plus one).
        batch: Keras's 0-based index of the batch within its epoch.
        seconds: wall time since the log's first ``on_train_begin``.
        loss: ``logs["loss"]``, the running mean over the epoch so far (nan if
            absent).
        logs: the logs as Keras passed them (a copy).
    """

    step: int
    epoch: int
    batch: int
    seconds: float
    loss: float
    logs: dict


class EpochLog(NamedTuple):
    """One ``on_epoch_end`` call.

    Attributes:
        epoch: 1-based epoch.
        step: the training step at which it ended (that of its last batch).
        seconds: wall time since the log's first ``on_train_begin``.
        loss: ``logs["loss"]``, the epoch's value (as Keras's ``History``).
        val_loss: ``logs["val_loss"]``; nan without validation.
        logs: the logs as Keras passed them (a copy).
    """

    epoch: int
    step: int
    seconds: float
    loss: float
    val_loss: float
    logs: dict


@dataclass
class KerasLog:
    """The batch and epoch logs of one or several ``fit`` calls, in order.

    Fed by :meth:`begin_epoch`, :meth:`end_batch` and :meth:`end_epoch`, which
    take Keras's arguments and the seconds elapsed; a later ``fit`` continues
    the step count, so its curve continues the earlier one.
    """

    batches: list[BatchLog] = field(default_factory=list)
    epochs: list[EpochLog] = field(default_factory=list)
    _epoch: int = field(default=1, repr=False)
    _steps_before_epoch: int = field(default=0, repr=False)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def step(self) -> int:
        """The last recorded training step (0 before any)."""
        return self.batches[-1].step if self.batches else 0

    def begin_epoch(self, epoch: int) -> None:
        self._epoch = epoch + 1
        self._steps_before_epoch = self.step

    def end_batch(self, batch: int, logs, seconds: float) -> BatchLog:
        logs = dict(logs or {})
        record = BatchLog(self._steps_before_epoch + batch + 1, self._epoch, batch, seconds,
                          _number(logs, "loss"), logs)
        self.batches.append(record)
        return record

    def end_epoch(self, epoch: int, logs, seconds: float) -> EpochLog:
        logs = dict(logs or {})
        record = EpochLog(epoch + 1, self.step, seconds, _number(logs, "loss"),
                          _number(logs, "val_loss"), logs)
        self.epochs.append(record)
        return record


def _number(logs, key) -> float:
    try:
        return float(logs[key])
    except (KeyError, TypeError, ValueError):
        return math.nan
