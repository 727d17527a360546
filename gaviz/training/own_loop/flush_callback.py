"""Applying each :class:`gaviz.Accumulator`'s partial window at the end of
every epoch of ``Model.fit``: :class:`FlushAtEpochEnd`, a Keras callback."""

from __future__ import annotations

import keras

from gaviz.training.own_loop.accumulator import Accumulator


class FlushAtEpochEnd(keras.callbacks.Callback):
    """A Keras callback: applies each accumulator's partial window right after
    the last training batch of every epoch of ``Model.fit``, as the big
    batch's last, smaller batch is applied: before validation and before any
    callback's ``on_epoch_end``, wherever this one is listed, so that
    ``EarlyStopping(restore_best_weights=True)`` and ``ModelCheckpoint`` keep
    the epoch's weights.

    The last batch is the one at ``params["steps"]``, which Keras knows for
    arrays, a dataset of known cardinality, a ``PyDataset`` and
    ``steps_per_epoch`` (with ``steps_per_execution`` > 1 the last call
    reports an index at or past it). Where Keras does not know an epoch's
    length (a dataset of unknown cardinality, a generator), the first epoch's
    window is applied at ``on_test_begin`` or ``on_epoch_end``, in list order,
    and later epochs take the first's length; an epoch longer than the first
    is refused (its window would be split). There, list this callback before
    the ones that read the weights, or give ``fit`` the length.

    It acts after each batch, so Keras runs batch-end callbacks in step with
    training, as it does for ``ModelCheckpoint``.

    Args:
        *accumulators: the :class:`Accumulator` s a model's ``train_step`` steps.
    """

    def __init__(self, *accumulators: Accumulator):
        super().__init__()
        for accumulator in accumulators:
            if not isinstance(accumulator, Accumulator):
                raise TypeError(
                    "`accumulators` must be gaviz.Accumulator instances. "
                    f"Received: {accumulator!r} of type {type(accumulator).__name__}"
                )
        if not accumulators:
            raise ValueError("`accumulators` must name at least one gaviz.Accumulator.")
        self.accumulators = accumulators
        self._training = False
        self._first_epoch_steps = None  # learned where Keras does not know an epoch's length
        self._steps_seen = 0  # this epoch's batches, as Keras's batch index reports them

    def _flush(self):
        for accumulator in self.accumulators:
            accumulator.flush()

    def _keras_steps(self):
        return (self.params or {}).get("steps")

    def on_train_begin(self, logs=None):
        self._training, self._first_epoch_steps = True, None

    def on_train_end(self, logs=None):
        self._training = False

    def on_epoch_begin(self, epoch, logs=None):
        self._steps_seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps_seen = batch + 1
        steps = self._keras_steps() or self._first_epoch_steps
        if steps is None:
            return
        if self._keras_steps() is None and self._steps_seen > steps:
            raise ValueError(
                f"FlushAtEpochEnd applied this epoch's partial window after batch {steps}, "
                "the first epoch's length (Keras does not know the data's length), but this "
                "epoch has more batches than that: its window was split. Give Model.fit the "
                "epoch's length: steps_per_epoch, or a dataset of known cardinality "
                "(dataset.apply(tf.data.experimental.assert_cardinality(batches)))."
            )
        if self._steps_seen >= steps:
            self._flush()

    def on_test_begin(self, logs=None):
        # Model.fit validates after the epoch's last step and before
        # on_epoch_end: where the last step was not known, the partial
        # window still belongs to the epoch validated.
        if self._training:
            self._flush()

    def on_epoch_end(self, epoch, logs=None):
        self._flush()
        if self._keras_steps() is None and self._first_epoch_steps is None:
            self._first_epoch_steps = self._steps_seen
