"""Lesson 01's exercises: the arithmetic of batch sizes.

::

    from gaviz.course import lesson01
    lesson01.effective_batch_size.check(effective_batch_size)
    lesson01.micro_batch_size_for.check(micro_batch_size_for)
"""

from __future__ import annotations

import numpy as np

from gaviz.course.exercise import Exercise, Incorrect, attempted, defined_at

#: (micro_batch_size, accumulation_steps, replicas) the checks try: k and replicas sharing a
#: factor (4 and 2, 4 and 8) and not (5 and 7).
_SETTINGS = [(32, 1, 1), (32, 8, 1), (16, 4, 2), (8, 4, 8), (3, 5, 7)]
#: (effective_batch_size, accumulation_steps, replicas) with no micro-batch size: one that k
#: alone divides (256 by 8, not 24), and one that k and replicas each divide but not their
#: product (48 by 8 and by 4, not by 32), so that only the product's remainder refuses all.
_INDIVISIBLE = [(250, 4, 1), (256, 3, 1), (256, 8, 3), (48, 8, 4)]


def _call(name, function, *args):
    """``("name(a, b, c)", function(a, b, c))``: the call as the message shows it, and its result."""
    return f"{name}({', '.join(map(str, args))})", function(*args)


def _whole(call, got) -> None:
    """Incorrect when a batch size came back a float (128.0): samples come in whole numbers."""
    if isinstance(got, (float, np.floating)):
        raise Incorrect(f"{call} gave {got!r}, a float: a batch size is a whole number of "
                        "samples (an int throughout: `replicas=1`, integer division `//`)")


def _default_replicas(name, function, args, expected) -> None:
    """Incorrect unless ``function(*args)``, without ``replicas``, gives ``expected``: one
    device needs no third argument."""
    call = f"{name}({', '.join(map(str, args))})"
    try:
        got = function(*args)
    except TypeError as error:
        raise Incorrect(f"{call} raised TypeError: {error}{defined_at(function)}: `replicas` "
                        "should default to 1, so that one device needs no third "
                        "argument") from None
    _whole(call, got)
    if got != expected:
        raise Incorrect(f"{call} gave {got!r}, expected {expected}: `replicas` should default "
                        "to 1")


def _check_effective_batch_size(effective_batch_size) -> str:
    attempted(effective_batch_size(32, 8, 1))
    for micro, k, replicas in _SETTINGS:
        expected = micro * k * replicas
        call, got = _call("effective_batch_size", effective_batch_size, micro, k, replicas)
        if got == micro * k and replicas > 1:
            raise Incorrect(f"{call} gave {got}, expected {expected}: each of the {replicas} "
                            "replicas runs its own micro-batches, so multiply by `replicas` too")
        if got == micro * k // replicas and replicas > 1:
            raise Incorrect(f"{call} gave {got}, expected {expected}: it divided by `replicas`, "
                            "but each replica runs its own micro-batches, so the replicas "
                            "multiply the samples of one update")
        if got == micro + k + replicas and got != expected:
            raise Incorrect(f"{call} gave {got}, expected {expected}: it added the three "
                            "numbers; each of accumulation_steps micro-steps sees a whole "
                            "micro-batch on each replica, so they multiply")
        if got != expected:
            raise Incorrect(f"{call} gave {got!r}, expected {expected}: one update sees "
                            "micro_batch_size samples in each of accumulation_steps micro-steps, "
                            "on each replica")
        _whole(call, got)
    _default_replicas("effective_batch_size", effective_batch_size, (32, 4), 128)
    return "one update sees micro_batch_size × accumulation_steps × replicas samples"


def _check_micro_batch_size_for(micro_batch_size_for) -> str:
    attempted(micro_batch_size_for(256, 8, 1))
    for micro, k, replicas in _SETTINGS:
        effective = micro * k * replicas
        call, got = _call("micro_batch_size_for", micro_batch_size_for, effective, k, replicas)
        if isinstance(got, float) and got == micro:
            raise Incorrect(f"{call} gave {got!r}, a float: a batch size is a whole number of "
                            "samples (integer division `//` keeps it an int)")
        if got == effective // k and replicas > 1:
            raise Incorrect(f"{call} gave {got}, expected {micro}: the {replicas} replicas share "
                            "the effective batch, so divide by `replicas` too")
        if got == effective // replicas and k > 1:
            raise Incorrect(f"{call} gave {got}, expected {micro}: the {k} micro-steps share "
                            "the effective batch too, so divide by `accumulation_steps` too")
        if got == effective * k * replicas and k * replicas > 1:
            raise Incorrect(f"{call} gave {got}, expected {micro}: it multiplied; "
                            "micro_batch_size_for undoes effective_batch_size, so it divides")
        if got != micro:
            raise Incorrect(f"{call} gave {got!r}, expected {micro}")
        _whole(call, got)
    _default_replicas("micro_batch_size_for", micro_batch_size_for, (256, 8), 32)
    for effective, k, replicas in _INDIVISIBLE:
        call = f"micro_batch_size_for({effective}, {k}, {replicas})"
        try:
            got = micro_batch_size_for(effective, k, replicas)
        except ValueError:
            continue
        except Exception as error:  # noqa: BLE001 - the wrong exception: say which
            raise Incorrect(f"{call} raised {type(error).__name__}; raise ValueError, the error "
                            "for an argument with the right type and a wrong value (an `assert` "
                            "disappears under `python -O`)") from error
        raise Incorrect(f"{call} returned {got!r}; it should raise ValueError: "
                        f"{_indivisible(effective, k, replicas)}")
    return ("micro_batch_size_for inverts effective_batch_size, and refuses an effective batch "
            "that accumulation_steps × replicas does not divide")


def _indivisible(effective, k, replicas) -> str:
    """Why no micro-batch size gives ``effective``, and what the answer's check missed."""
    product = k * replicas
    if effective % k == 0 and effective % replicas == 0:
        return (f"{k} and {replicas} each divide {effective}, but their product, {product}, "
                "does not: one remainder, by accumulation_steps × replicas, says whether a "
                "micro-batch size exists; two remainders, one by each, miss a shared factor")
    if effective % k == 0:
        return (f"{k} divides {effective}, but {k} × {replicas} = {product} does not: take "
                "the remainder by the product, in parentheses (`%` binds as tightly as `*`, "
                "so `e % k * r` is `(e % k) * r`)")
    return (f"{k} × {replicas} = {product} does not divide {effective}, so no micro-batch "
            "size gives that effective batch")


effective_batch_size = Exercise(
    "01 effective_batch_size", _check_effective_batch_size,
    ["Count the samples behind one update: how many in one micro-step, how many micro-steps, "
     "on how many devices?",
     "Three numbers multiply; give `replicas` a default value."],
    "01_batch_sizes.py")

micro_batch_size_for = Exercise(
    "01 micro_batch_size_for", _check_micro_batch_size_for,
    ["It undoes effective_batch_size: divide by what effective_batch_size multiplied by.",
     "Check the remainder (`%`) before dividing; if it is not 0, `raise ValueError(...)` with a "
     "message that names the numbers.",
     "Use integer division `//`, so the result is an int."],
    "01_batch_sizes.py")
