"""Solution to lesson 01: the arithmetic of batch sizes.

One update sees ``micro_batch_size`` samples on each replica, in each of
``accumulation_steps`` micro-steps::

    effective_batch_size = micro_batch_size * accumulation_steps * replicas
"""


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return value


def effective_batch_size(micro_batch_size, accumulation_steps, replicas=1):
    """Samples that contribute to one optimizer update.

    Raises:
        ValueError: an argument is not an integer >= 1.
    """
    _check_positive_int("micro_batch_size", micro_batch_size)
    _check_positive_int("accumulation_steps", accumulation_steps)
    _check_positive_int("replicas", replicas)
    return micro_batch_size * accumulation_steps * replicas


def micro_batch_size_for(effective_batch_size, accumulation_steps, replicas=1):
    """The per-replica micro-batch size that gives ``effective_batch_size``.

    Raises:
        ValueError: an argument is not an integer >= 1, or
            ``accumulation_steps * replicas`` does not divide
            ``effective_batch_size``.
    """
    _check_positive_int("effective_batch_size", effective_batch_size)
    _check_positive_int("accumulation_steps", accumulation_steps)
    _check_positive_int("replicas", replicas)
    per_micro_step = accumulation_steps * replicas
    if effective_batch_size % per_micro_step:
        raise ValueError(
            f"`effective_batch_size` must be divisible by accumulation_steps * replicas "
            f"= {per_micro_step}. Received: effective_batch_size={effective_batch_size}, "
            f"accumulation_steps={accumulation_steps}, replicas={replicas}"
        )
    return effective_batch_size // per_micro_step
