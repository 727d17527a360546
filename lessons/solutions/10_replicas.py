"""Solution to lesson 10's exercise: batch sizes under a distribution strategy.

With ``replicas`` devices in sync, every device takes its own micro-batch, so
the dataset must be batched with the global micro-batch size; an update then
sums ``accumulation_steps`` of those global micro-batches::

    global micro-batch  = per-replica micro-batch x replicas
    effective batch     = per-replica micro-batch x accumulation_steps x replicas
"""


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return value


def global_batch_size(per_replica_micro_batch, replicas):
    """The size to ``.batch()`` the dataset with: one micro-batch per replica.

    Raises:
        ValueError: an argument is not an integer >= 1.
    """
    return _positive_int("per_replica_micro_batch", per_replica_micro_batch) * _positive_int(
        "replicas", replicas
    )


def effective_batch_size(per_replica_micro_batch, accumulation_steps, replicas):
    """Samples in one full window: what one optimizer update averages over.

    Raises:
        ValueError: an argument is not an integer >= 1.
    """
    steps = _positive_int("accumulation_steps", accumulation_steps)
    return global_batch_size(per_replica_micro_batch, replicas) * steps
