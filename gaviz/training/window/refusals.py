"""How a refused window is said, for the trainer and :class:`gaviz.Accumulator`.

A window is judged (:meth:`gaviz.training.window.window_cycle.WindowCycle.judge`) to
a verdict; a refused one is discarded, not applied. :func:`refusal` is the
error that says why, for both: the trainer raises it in Python from the
verdict its graph call reports (``fit``'s loop), the Accumulator raises it
eagerly or asserts it in a graph. XLA drops assertions, so a refusal inside
a call compiled by XLA is counted (:class:`Unreported`) and raised by the
next eager call.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from gaviz.training.fit.history import NonFiniteUpdate, NonFiniteWindow
from gaviz.training.window.verdicts import BAD_COUNT, NOT_FINITE, REFUSALS


class Context(NamedTuple):
    """What a refusal's message says besides its reason.

    Attributes:
        iterations: ``optimizer.iterations`` when it was refused (None in a
            graph, where the message is an assertion's).
        update, epoch, loss: the trainer's update number, epoch and the
            window's loss (None for an Accumulator, which knows no epoch).
        windows: how many windows were refused for this reason.
        compiled: whether they were refused inside calls compiled by XLA.
        replicas: replicas in sync (what a valid ``count`` is depends on it).
        left_out: the names of the variables no micro-step gave a gradient.
    """

    iterations: int | None = None
    update: int | None = None
    epoch: int | None = None
    loss: float = float("nan")
    windows: int = 1
    compiled: bool = False
    replicas: int = 1
    left_out: str = "none"


def refusal(verdict: int, context: Context) -> Exception | None:
    """The error that says a window was refused with ``verdict``; None when
    the verdict is not a refusal."""
    if verdict not in REFUSALS:
        return None
    if verdict == NOT_FINITE and context.epoch is not None:
        return NonFiniteUpdate(context.update, context.epoch, context.loss, context.iterations)
    where = ("in calls compiled by XLA (jit_compile=True), which drops assertions, "
             if context.compiled else "")
    refused = f"{context.windows} window{'s' if context.windows > 1 else ''} {where}"
    if verdict == NOT_FINITE:
        return NonFiniteWindow(context.iterations, refused)
    if verdict == BAD_COUNT:
        return ValueError(
            f"`count` must be {count_expected(context.replicas)} for every micro-batch, and "
            "a window's total count > 0: what the micro-batches' losses divide by. "
            f"{refused}broke this: not applied, and discarded (the model and optimizer keep "
            "the update before it)."
        )
    return ValueError(
        f"{refused}gave gradients (not None) to a set of variables that this "
        "tf.function's update was not traced for: it chooses which variables had a "
        "gradient among the micro-steps traced before it, and a micro-step with another "
        "pattern was traced after it. The window was not applied, and discarded. "
        f"Variables it leaves out: {context.left_out}. Call apply() or flush() "
        "outside tf.function (it reads which variables had a gradient), or give the "
        "variables zeros (tf.zeros_like) where their gradient is None if they should be "
        "updated in every window."
    )


def count_expected(replicas: int) -> str:
    """A replica's share of a global micro-batch may be empty; a micro-batch may not."""
    return "> 0 and finite" if replicas == 1 else ">= 0 and finite (0: this replica's share is empty)"


def count_is_valid(count, replicas: int):
    """Whether a micro-batch's ``count`` is one its loss can divide by (a
    boolean tensor): finite, > 0 (>= 0 for a replica's share)."""
    return tf.logical_and(tf.math.is_finite(count), count > 0 if replicas == 1 else count >= 0)


class Unreported(tf.Module):
    """Windows refused inside calls compiled by XLA, which drops assertions:
    counted per reason, for the next eager call to raise.

    Args:
        strategy: the strategy the counter is made under.
        context: ``() -> Context``, what a message says besides its reason.
    """

    def __init__(self, strategy, context):
        super().__init__(name="unreported_refusals")
        self.context, self._traced = context, False
        with strategy.scope():
            self.counts = tf.Variable(tf.zeros([len(REFUSALS)], tf.int64), trainable=False,
                                      name="unreported_refusals")

    def say(self, verdict):
        """Says a refused ``verdict``: raised eagerly, asserted in a graph (an
        assertion XLA dropped lets the count run). Returns ``verdict``."""
        if tf.executing_eagerly():
            error = refusal(int(verdict), self.context())
            if error is not None:
                raise error
            return verdict
        self._traced = True
        asserts = [tf.raw_ops.Assert(condition=tf.not_equal(verdict, code),
                                     data=[str(refusal(code, self.context()))])
                   for code in REFUSALS]
        with tf.control_dependencies(asserts):
            # Runs only where no assertion stopped the call: under XLA. The
            # verdicts that are not refusals index nothing (a row of zeros).
            self.counts.assign_add(tf.one_hot(verdict - REFUSALS[0], len(REFUSALS),
                                              dtype=tf.int64))
        return tf.identity(verdict)

    def raise_pending(self):
        """Eagerly, raises what calls compiled by XLA refused since the last
        eager call (one reason per call, each said once)."""
        if not (self._traced and tf.executing_eagerly()):
            return
        counted = self.counts.numpy()
        if counted.any():
            index = int(np.flatnonzero(counted)[0])
            self.counts.assign(tf.where(tf.range(len(REFUSALS)) == index,
                                        tf.constant(0, tf.int64), counted))
            raise refusal(REFUSALS[index], self.context()._replace(
                windows=int(counted[index]), compiled=True))


def too_many_patterns(varying, patterns: int, limit: int) -> ValueError:
    """An Accumulator's update traced for more sets of variables with a
    gradient than it may choose among: ``varying`` have a gradient in some
    micro-steps and None in others."""
    return ValueError(
        f"`gradients` are None for different variables in different micro-steps "
        f"({names(varying)}): a window of them may give gradients to any of {patterns} sets "
        f"of variables, more than the {limit} a tf.function's update is traced for. Call "
        "apply() or flush() outside tf.function (it reads which variables had a gradient), "
        "or give these variables zeros (tf.zeros_like) where their gradient is None if they "
        "should be updated in every window."
    )


def checked_count(count, replicas: int):
    """A micro-batch's ``count`` as a float32 scalar, refused eagerly where it is
    not one its loss can divide by (in a graph, asserted where it is added)."""
    count = tf.cast(tf.convert_to_tensor(count), tf.float32)
    if count.shape.rank not in (None, 0):
        raise ValueError(
            f"`count` must be a scalar: what the micro-batch's loss divides by. "
            f"Received: a tensor of shape {count.shape}"
        )
    if tf.executing_eagerly() and not bool(count_is_valid(count, replicas)):
        raise ValueError(
            f"`count` must be {count_expected(replicas)}: what the micro-batch's loss "
            f"divides by (its rows, real tokens or weight sum). Received: count={float(count)}"
        )
    return count


def name(variable) -> str:
    """A variable's name for a message."""
    return getattr(variable, "path", None) or variable.name


def names(variables, shown: int = 6) -> str:
    """Variables' names for a message: the first ``shown``, then how many more."""
    names = [name(v) for v in variables[:shown]]
    if len(variables) > shown:
        names.append(f"and {len(variables) - shown} more")
    return ", ".join(names) or "none"
