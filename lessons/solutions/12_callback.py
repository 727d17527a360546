"""Solution to lesson 12's exercise: an ``on_update`` callback that stops early.

``AccumulationTrainer.fit`` calls ``on_update(update)`` after every applied
update; setting ``trainer.stop_training = True`` ends ``fit`` once the current
window is finished, so the weights stay consistent.
"""


def make_early_stop(trainer, threshold):
    """Returns an ``on_update`` callback for ``trainer.fit``.

    The callback appends ``(update.update, update.loss)`` to its ``records``
    list and sets ``trainer.stop_training = True`` as soon as an update's
    effective-batch loss is below ``threshold``.

    Args:
        trainer: the ``gaviz.AccumulationTrainer`` (anything with a
            ``stop_training`` attribute) whose ``fit`` the callback is passed to.
        threshold: stop once ``update.loss < threshold``.

    Returns:
        The callback; its ``records`` attribute holds the ``(update, loss)`` pairs.
    """
    records = []

    def on_update(update):
        records.append((update.update, update.loss))
        if update.loss < threshold:
            trainer.stop_training = True

    on_update.records = records
    return on_update
