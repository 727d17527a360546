"""Exercises for the lessons: check an answer, ask for a hint, find the solution.

In the style of Kaggle Learn's ``learntools``: a lesson's exercise cell is one
to three lines::

    from gaviz.course import lesson04
    lesson04.reset.check(reset)     # pass, the specific fault, or "not attempted yet"
    lesson04.reset.hint()           # the next hint, without the answer
    lesson04.reset.solution()       # the solution's code, and the %load line that pastes it

A lesson may also run a wrong answer through the check on purpose, before the
learner's attempt: ``lesson13.tokens.demonstrate(wrong, what="...")`` shows it
as a demonstration, never as the learner's "✗ Incorrect".

A checker is a plain function of the learner's answer. It returns the
message shown on success, raises :class:`Incorrect` with the specific fault,
or :class:`NotAttempted` when the answer is still the lesson's stub (a stub
that raises ``NotImplementedError`` counts as not attempted too).
"""

from __future__ import annotations

import html
import pathlib
import re
import traceback
from dataclasses import dataclass, field
from typing import Callable, Sequence


class NotAttempted(Exception):
    """The answer is still the stub the lesson gave."""


class Incorrect(AssertionError):
    """The answer runs but is wrong; the message names the fault."""


#: Status -> (symbol, colour) for the rich output. None of them is an error
#: output, so a lesson run with untouched stubs shows nothing red.
_STYLE = {
    "pass": ("✓ Correct", "#1a7f37"),
    "fail": ("✗ Incorrect", "#cf222e"),
    "not attempted": ("○ Not attempted yet", "#6e7781"),
    "demonstration": ("◇ Demonstration, not your answer", "#8250df"),
    "hint": ("💡 Hint", "#9a6700"),
    "solution": ("📖 Solution", "#0969da"),
}


@dataclass(frozen=True)
class Outcome:
    """What one check, hint or solution request says; shown coloured in a notebook."""

    exercise: str
    status: str  # a key of _STYLE
    message: str
    code: str = ""  # a solution's code, shown below the message

    def __bool__(self) -> bool:
        return self.status == "pass"

    def __str__(self) -> str:
        label, _ = _STYLE[self.status]
        text = f"{label} ({self.exercise}): {self.message}"
        return f"{text}\n\n{self.code}" if self.code else text

    __repr__ = __str__

    def _repr_html_(self) -> str:
        label, colour = _STYLE[self.status]
        return (f'<div style="border-left: 4px solid {colour}; padding: 2px 10px">'
                f'<span style="color: {colour}; font-weight: bold">{label}</span> '
                f'<span style="color: #57606a">({html.escape(self.exercise)})</span><br>'
                f'{html.escape(self.message)}{self._code_html()}</div>')

    def _code_html(self) -> str:
        if not self.code:
            return ""
        return ('<pre style="background: #f6f8fa; padding: 6px 10px; margin: 6px 0 2px">'
                f'<code>{html.escape(self.code)}</code></pre>')


def show(outcome: Outcome) -> None:
    """Displays ``outcome`` richly in a notebook, as text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python without IPython
        print(outcome)
        return
    if get_ipython() is None:
        print(outcome)
    else:
        display(outcome)


@dataclass
class Exercise:
    """One exercise of a lesson.

    Args:
        name: how the lesson calls it (``"04 reset"``).
        checker: ``checker(*answer) -> str``; raises :class:`Incorrect` or
            :class:`NotAttempted`.
        hints: hints in order, none of which gives the answer away.
        solution_file: the solution's path from ``lessons/``.
    """

    name: str
    checker: Callable[..., str]
    hints: Sequence[str]
    solution_file: str
    _hints_shown: int = field(default=0, repr=False)
    _last: tuple = field(default=(), repr=False)  # (answer, outcome) of the last check

    def evaluate(self, *answer) -> Outcome:
        """Runs the checker on ``answer`` and returns its outcome, without showing it."""
        try:
            message = self.checker(*answer)
        except (NotAttempted, NotImplementedError) as stub:
            return Outcome(self.name, "not attempted", str(stub) or "replace the stub with your code")
        except Incorrect as fault:
            return Outcome(self.name, "fail", str(fault))
        except Exception as error:  # noqa: BLE001 - the learner's code raised: say what and where
            return Outcome(self.name, "fail", raised(error, *answer))
        return Outcome(self.name, "pass", message)

    def check(self, *answer) -> None:
        """Checks ``answer`` and shows pass, the specific fault, or "not attempted yet"."""
        outcome = self.evaluate(*answer)
        self._last = (answer, outcome)
        show(outcome)

    def passes(self, *answer) -> bool:
        """Whether ``answer`` passes, shown nowhere: the last check's outcome when it
        checked these very objects, else a new evaluation. A lesson's payoff cell
        asks it before running the learner's code."""
        if self._last and len(self._last[0]) == len(answer) and all(
                a is b for a, b in zip(self._last[0], answer)):
            return bool(self._last[1])
        return bool(self.evaluate(*answer))

    def demonstrate(self, *answer, what: str) -> Outcome:
        """Runs a wrong answer through the check to show what the check says of it,
        labelled a demonstration (``what`` names the answer), not the learner's result.

        Raises:
            ValueError: the demonstrated answer passes, so it shows no fault.
        """
        outcome = self.evaluate(*answer)
        if outcome.status != "fail":
            raise ValueError(f"`demonstrate` shows a wrong answer's fault, but {what} "
                             f"{'passes' if outcome else 'is not attempted'}")
        return Outcome(self.name, "demonstration", f"{what}. The check says: {outcome.message}")

    def hint(self) -> None:
        """Shows the next hint (the last one again once all are shown)."""
        number = min(self._hints_shown, len(self.hints) - 1)
        self._hints_shown += 1
        show(Outcome(self.name, "hint",
                     f"{number + 1} of {len(self.hints)}: {self.hints[number]}"))

    def solution(self) -> None:
        """Shows the solution's code, and the ``%load`` line that pastes it into a cell."""
        load = f"`%load solutions/{self.solution_file}`"
        code = solution_code(self.solution_file)
        if code is None:  # the lessons' folder is not at hand: say where the file is
            show(Outcome(self.name, "solution", f"run {load} in a new cell (in the lessons/ "
                         "folder), then run that cell and check again"))
        else:
            show(Outcome(self.name, "solution", f"{load} in a new cell pastes this code; run "
                         "that cell, then check again", code))


#: (words of an error TensorFlow or Keras raises, what the learner's code did to cause it): the
#: mistakes whose error names neither the learner's line nor the fault.
KNOWN_ERRORS = [
    ("object has no attribute '_unique_id'",
     "apply_gradients was given (variable, gradient) pairs: it takes "
     "zip(gradients, variables), each gradient first"),
    ("branch outputs of cond must match",
     "the two branches of a tf.cond return different things (one a value, the other None): "
     "TensorFlow needs both to return the same kind of result, so make both return nothing, "
     "or both a value of the same shape"),
    ("Tensor conversion requested dtype",
     "a tensor of one dtype went where another is needed (float32 zeros into a float64 "
     "variable?): make each value with the dtype of the variable it goes into"),
    ("Shape mismatch",
     "a value of another shape was assigned to a variable: a variable keeps its shape, so "
     "assign a value of that same shape"),
    ("must have the same nested structure",
     "the two branches of a tf.cond return different things: TensorFlow needs both to return "
     "the same kind of result"),
]


def raised(error: BaseException, *answer) -> str:
    """What the learner's code raised, in a sentence: the error and the learner's own line,
    with the cause named when it is one of :data:`KNOWN_ERRORS` (TensorFlow's message then
    points into its generated code, not at the fault). When the error passed through no line
    of the learner's (TensorFlow or gaviz choked on what the learner's function returned), the
    line that defines the learner's function, when the answer is one function (of several,
    which one the fault is in is not known)."""
    text = _AUTOGRAPH_NAME.sub(r"\1", str(error))
    functions = [part for part in answer if callable(part)]
    where = _user_line(error) or (defined_at(functions[0]) if len(functions) == 1 else "")
    for words, cause in KNOWN_ERRORS:
        if words in text:
            return f"your code raised {type(error).__name__}{where}: {cause}"
    if "in user code:" in text:  # a traced function: TensorFlow's own frames, then the error
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        last = lines[-1] if lines else text
        last = last.removeprefix(f"{type(error).__name__}: ")  # said once, before the line
        return f"your code raised {type(error).__name__}{where}: {last}"
    if not where:
        last = traceback.extract_tb(error.__traceback__)[-1]
        where = f" (line {last.lineno}: {last.line})"
    return f"your code raised {type(error).__name__}: {text}{where}"


#: The name AutoGraph gives a function it converted (``accumulator.step`` called in a
#: tf.function): ``outer_factory.<locals>.inner_factory.<locals>.tf__step``, said as ``step``.
_AUTOGRAPH_NAME = re.compile(r"(?:\w+\.<locals>\.)*tf__(\w+)")


def _user_line(error: BaseException) -> str:
    """`` (line N: code)`` of the learner's last line the error passed through, or ""."""
    # Inside tf.function, TensorFlow lists the learner's frames in its message, marked "*".
    frames = re.findall(r'File "([^"]+)", line (\d+), in \w+ +\*?\n +(.+)', str(error))
    frames = [f for f in frames if not _library(f[0])]
    if frames:
        return f" (line {frames[-1][1]}: {frames[-1][2].strip()})"
    mine = [f for f in traceback.extract_tb(error.__traceback__) if not _library(f.filename)]
    return f" (line {mine[-1].lineno}: {mine[-1].line})" if mine else ""


def defined_at(function) -> str:
    """`` (line N: def name(...):)``, where the learner defined ``function``, or "": for a
    fault of the function as a whole (a missing default, what it returns), whose error, if
    any, passes through no line of the learner's."""
    import inspect
    import linecache

    function = getattr(function, "python_function", function)  # a tf.function's own
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None or _library(code.co_filename):
        return ""
    for number in range(code.co_firstlineno, code.co_firstlineno + 10):  # past decorators
        line = linecache.getline(code.co_filename, number).strip()
        if line.startswith(("def ", "async def ")):
            return f" (line {number}: {line})"
    return ""


def _library(filename: str) -> bool:
    """Whether ``filename`` is TensorFlow's, Keras's, gaviz's or generated, not the learner's."""
    package = str(pathlib.Path(__file__).resolve().parents[1])  # gaviz/ itself
    return filename.startswith(package) or any(
        part in filename for part in ("site-packages", "dist-packages", "__autograph_generated"))


def solution_folders() -> list[pathlib.Path]:
    """Where a solution is read from: ``solutions/`` in the kernel's folder, where
    ``%load solutions/...`` finds it (a lesson's kernel starts in lessons/, or in
    the learner's copy of it), then the course gaviz carries (a wheel's copy or
    a checkout's lessons/)."""
    from gaviz.lesson_files import lessons_folder

    folders = [pathlib.Path("solutions")]
    try:
        folders.append(lessons_folder() / "solutions")
    except FileNotFoundError:  # an install without its lessons: the kernel's folder only
        pass
    return folders


def solution_code(solution_file: str) -> str | None:
    """The code of ``solutions/<solution_file>``, or None when no folder has it."""
    for folder in solution_folders():
        path = folder / solution_file
        if path.is_file():
            return path.read_text().rstrip("\n")
    return None


def attempted(value, stub=None) -> None:
    """Raises :class:`NotAttempted` when ``value`` is what the lesson's stub returns."""
    if value is stub:
        raise NotAttempted("replace the stub with your code (it still returns "
                           f"{stub!r})")
