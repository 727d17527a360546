"""Lesson 01's exercise: batch-size arithmetic."""

from gaviz.course.exercise import Exercise, Incorrect, NotAttempted

_CASES = [(32, 1, 1), (32, 8, 1), (16, 4, 2), (8, 4, 8), (3, 5, 7)]
_INDIVISIBLE = [(250, 4, 1), (256, 3, 1), (256, 8, 3)]


def _check_batch_sizes(effective_batch_size, micro_batch_size_for) -> str:
    if effective_batch_size(32, 8) is None and micro_batch_size_for(256, 8) is None:
        raise NotAttempted("both functions still return None")
    for micro, k, replicas in _CASES:
        expected = micro * k * replicas
        got = effective_batch_size(micro, k, replicas)
        if got != expected:
            raise Incorrect(f"effective_batch_size({micro}, {k}, {replicas}) gave {got}, "
                            f"expected {expected}: micro-batch x accumulation steps x replicas")
        got = micro_batch_size_for(expected, k, replicas)
        if got != micro:
            raise Incorrect(f"micro_batch_size_for({expected}, {k}, {replicas}) gave {got}, "
                            f"expected {micro}")
    if effective_batch_size(32, 4) != 128:
        raise Incorrect("replicas should default to 1: effective_batch_size(32, 4) is 128")
    for bad in _INDIVISIBLE:
        try:
            micro_batch_size_for(*bad)
        except ValueError:
            continue
        raise Incorrect(f"micro_batch_size_for{bad} should raise ValueError: "
                        f"{bad[1]} x {bad[2]} does not divide {bad[0]}")
    return "both directions, with replicas, and sizes that do not divide refused"


batch_sizes = Exercise(
    "01 batch sizes", _check_batch_sizes,
    hints=["effective = micro-batch x accumulation steps x replicas.",
           "Going back, divide by accumulation_steps x replicas; check the remainder with % first."],
    solution_file="01_batch_sizes.py")
