"""Lesson 06 solution: the effective batch size of every update, per tail policy.

An epoch is cut into micro-batches of ``micro_batch_size`` samples (the last
one may be shorter, as ``dataset.batch(micro_batch_size)`` does), and the
micro-batches into windows of ``accumulation_steps``. What happens to a last
window with fewer micro-batches depends on ``tail``:

- ``"flush"``: applied at the end of the epoch, as its own (smaller) update;
- ``"drop"``: discarded;
- ``"carry"``: continued into the next epoch; a window still unfinished when
  training ends is never applied.
"""

TAILS = ("flush", "drop", "carry")


def micro_batch_sizes(num_samples, micro_batch_size):
    """Sizes of one epoch's micro-batches: full ones, then the remainder if any."""
    full, rest = divmod(num_samples, micro_batch_size)
    return [micro_batch_size] * full + ([rest] if rest else [])


def window_sizes(num_samples, micro_batch_size, accumulation_steps, tail="flush", epochs=1):
    """Effective batch size of each update, in order.

    Args:
        num_samples: samples per epoch (N).
        micro_batch_size: samples per micro-batch (b).
        accumulation_steps: micro-batches per full window (k).
        tail: ``"flush"``, ``"drop"`` or ``"carry"``.
        epochs: epochs trained.

    Returns:
        A list of ints, one per update: samples in that update's window.

    Raises:
        ValueError: an unknown ``tail`` or a size below 1.
    """
    if tail not in TAILS:
        raise ValueError(f"`tail` must be one of {TAILS}. Received: tail={tail!r}")
    for name, value in [("num_samples", num_samples), ("micro_batch_size", micro_batch_size),
                        ("accumulation_steps", accumulation_steps), ("epochs", epochs)]:
        if value < 1:
            raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value}")
    sizes, window = [], []
    for _ in range(epochs):
        for size in micro_batch_sizes(num_samples, micro_batch_size):
            window.append(size)
            if len(window) == accumulation_steps:
                sizes.append(sum(window))
                window = []
        if window and tail == "flush":
            sizes.append(sum(window))
        if tail != "carry":
            window = []
    return sizes
