"""Lesson 01's exercises: the arithmetic of batch sizes.

::

    from gaviz.course import lesson01
    lesson01.effective_batch_size.check(effective_batch_size)
    lesson01.micro_batch_size_for.check(micro_batch_size_for)
"""

from __future__ import annotations

from gaviz.course.exercise import Exercise, Incorrect, attempted

#: (micro_batch_size, accumulation_steps, replicas) the checks try.
_SETTINGS = [(32, 1, 1), (32, 8, 1), (16, 4, 2), (8, 4, 8), (3, 5, 7)]
#: (effective_batch_size, accumulation_steps, replicas) with no micro-batch size.
_INDIVISIBLE = [(250, 4, 1), (256, 3, 1), (256, 8, 3)]


def _call(name, function, *args):
    """``("name(a, b, c)", function(a, b, c))``: the call as the message shows it, and its result."""
    return f"{name}({', '.join(map(str, args))})", function(*args)


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
    if effective_batch_size(32, 4) != 128:
        raise Incorrect(f"effective_batch_size(32, 4) gave {effective_batch_size(32, 4)!r}, "
                        "expected 128: `replicas` should default to 1")
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
                        f"{k} × {replicas} = {k * replicas} does not divide {effective}, so no "
                        "micro-batch size gives that effective batch")
    return ("micro_batch_size_for inverts effective_batch_size, and refuses an effective batch "
            "that accumulation_steps × replicas does not divide")


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
