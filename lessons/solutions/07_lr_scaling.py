"""Solution to lesson 07's exercise: scaling the learning rate with the batch.

A learning rate tuned at ``base_batch`` samples per update is a starting point
for another ``effective_batch``::

    linear: lr = base_lr x effective_batch / base_batch
    sqrt:   lr = base_lr x sqrt(effective_batch / base_batch)

The linear rule (Goyal et al., 2017) keeps the distance SGD travels per sample
about the same; the square-root rule keeps the update's noise about the same
and is the usual choice for Adam-like optimizers. Neither is a guarantee:
large factors usually need a warm-up, and can still diverge.
"""

import math

RULES = ("linear", "sqrt")


def scaled_learning_rate(base_lr, base_batch, effective_batch, rule="linear"):
    """The learning rate for ``effective_batch``, from one tuned at ``base_batch``.

    Args:
        base_lr: the learning rate that works at ``base_batch`` (> 0).
        base_batch: samples per update it was tuned at (> 0).
        effective_batch: samples per update now, e.g.
            micro-batch x accumulation_steps x replicas (> 0).
        rule: ``"linear"`` or ``"sqrt"``.

    Returns:
        The scaled learning rate, a float.

    Raises:
        ValueError: an unknown ``rule`` or a non-positive number.
    """
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {RULES}. Received: rule={rule!r}")
    for name, value in (("base_lr", base_lr), ("base_batch", base_batch),
                        ("effective_batch", effective_batch)):
        if not value > 0:
            raise ValueError(f"`{name}` must be > 0. Received: {name}={value!r}")
    ratio = effective_batch / base_batch
    return float(base_lr * (ratio if rule == "linear" else math.sqrt(ratio)))
