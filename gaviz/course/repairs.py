"""Checks shared by the fix-it lessons (04-06): is lesson 03's loop, with the learner's piece
in it, exact? ``gaviz.diagnose`` answers, and names the defect when it is not."""

import gaviz
from gaviz.course.exercise import Incorrect, NotAttempted, raised
from gaviz.course.loop import accumulation_epoch

_DOES_NOTHING = (lambda *arguments: None).__code__.co_code


def does_nothing(function) -> bool:
    """Whether ``function``'s body is only ``...``, ``pass`` or ``return None`` (a stub)."""
    return getattr(function, "__code__", None) is not None and \
        function.__code__.co_code == _DOES_NOTHING


def require_attempted(function, what: str) -> None:
    """Raises :class:`NotAttempted` with ``what`` when ``function`` is still a stub."""
    if does_nothing(function):
        raise NotAttempted(what)


def exact_with(**pieces) -> None:
    """Raises :class:`Incorrect` unless lesson 03's loop with ``pieces`` is exact by diagnose."""
    def with_your_piece(*arguments):  # lesson 03's loop with your piece in it
        return accumulation_epoch(*arguments, **pieces)

    # What diagnose's summary calls it, in the course's words (not with_your_piece's own name).
    with_your_piece.__qualname__ = f"lesson 03's loop with your {' and '.join(pieces)}"
    try:
        diagnosis = gaviz.diagnose(with_your_piece)
    except gaviz.SubjectError as error:
        cause = error.__cause__ or error
        said = raised(cause, *pieces.values()).removeprefix("your code raised ")
        raise Incorrect(f"{with_your_piece.__qualname__} raised {said}") from error
    if not diagnosis.exact:
        raise Incorrect("gaviz.diagnose finds: " + diagnosis.summary())
