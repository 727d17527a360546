"""Every lesson with exercises, solved: each exercise cell followed by its
solution's code, as `%load solutions/NN_x.py` pastes it, runs top to bottom
with every check passing and every payoff cell (the cells that use the
learner's answer) showing what the lesson's prose says it shows. A lesson must
not contradict itself once the learner has done the work (issue #25: lesson
04's detector, solved, once failed to flag the lesson's own probe). Since the
lesson runs anyway, the comparisons its prose states a number for (gaviz's
Accumulator or Model.fit against a big batch: lessons 08, 09, 10 and 13) are read here too.

Each lesson runs once more than in test_lessons.py (8-30 s each).
"""

import ast
import importlib
import json
import re

import pytest
from lesson_runner import LESSONS, faults, lesson_paths, run_lesson

from gaviz.course.exercise import Exercise

STUB = "# your code here"
CHECK = re.compile(r"\b(lesson\d\d)\.(\w+)\.check\(")
WITH_EXERCISES = ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13"]


def _code_sources(path):
    cells = json.loads(path.read_text())["cells"]
    return [(index, "".join(cell["source"])) for index, cell in enumerate(cells)
            if cell["cell_type"] == "code"]


def loaded(solution_file):
    """A solution's code as `%load solutions/<solution_file>` pastes it into a cell."""
    text = (LESSONS / "solutions" / solution_file).read_text()
    return f"# %load solutions/{solution_file}\n{text}"


def exercise_solutions(path):
    """{index of each exercise cell: the solution files of the exercises its
    check cell (the next code cell) checks, each once, in order}."""
    code = _code_sources(path)
    solutions = {}
    for (index, source), (_, next_source) in zip(code, code[1:]):
        if STUB not in source:
            continue
        checks = CHECK.findall(next_source)
        assert checks, f"{path.name}: exercise cell {index} is not followed by a check"
        exercises = [getattr(importlib.import_module(f"gaviz.course.{module}"), name)
                     for module, name in checks]
        solutions[index] = list(dict.fromkeys(e.solution_file for e in exercises))
    return solutions


def solved_paths():
    return [path for path in lesson_paths() if exercise_solutions(path)]


def shown(cell):
    """What a code cell showed, as text: streams and each display's text/plain."""
    parts = []
    for output in cell.outputs:
        if "text" in output:
            parts.append(output.text)
        elif "text/plain" in output.get("data", {}):
            parts.append(output.data["text/plain"])
    return "\n".join(parts)


def shown_by(notebook, marker):
    """What the one code cell whose source holds ``marker`` showed."""
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and marker in cell.source]
    assert len(cells) == 1, f"{len(cells)} code cells hold {marker!r}"
    return shown(cells[0])


def numbers_after(text, label):
    return [float(n) for n in re.findall(rf"{re.escape(label)}\s*([-+0-9.e]+)", text)]


# What each payoff cell or comparison claims, once solved: the lesson's prose says so beside it.
def _lesson04(notebook):
    # Section 3's prose: the detector flags the missing reset's probe, not the exact run's.
    text = shown_by(notebook, "probe run flagged")
    assert "probe run flagged (missing reset, exact): True False" in text, text


def _lesson05(notebook):
    # (b)'s payoff trains with the learner's micro_loss and lands on the exact trainer.
    text = shown_by(notebook, "|your micro_loss - exact trainer|")
    (gap,) = numbers_after(text, "|your micro_loss - exact trainer| =")
    assert gap < 1e-5, text
    # window_loss of a token window is the loss of the same tokens as one big batch.
    text = shown_by(notebook, "window_loss of the first token window")
    (mine,), (whole,) = (numbers_after(text, "window_loss of the first token window:"),
                         numbers_after(text, "the same window as one big batch:"))
    assert mine == pytest.approx(whole, rel=1e-5), text


def _lesson08(notebook):
    # The learner's window function is timed beside the others, and beats the eager loop.
    text = shown_by(notebook, "your window, a call per window")
    assert "still the stub" not in text, text
    (ratio,) = [float(r) for r in re.findall(r"\(\s*([0-9.]+)x the eager loop\)", text)]
    assert ratio > 1, text
    # The last section: the learner's loop on gaviz.Accumulator (step, then flush) lands on
    # step 2's graph loop, the partial window of one micro-batch included.
    text = shown_by(notebook, "max |w_accumulator - w_graph_loop|")
    (gap,) = numbers_after(text, "max |w_accumulator - w_graph_loop| =")
    assert "updates: 9 and 9" in text and gap < 1e-5, text


def _lesson09(notebook):
    # The learner's median_epoch_seconds times gaviz at k = 1, 4, 16 and 64: past 16, where
    # the exercise asks why it helps less and less.
    text = shown_by(notebook, "median_epoch_seconds(lambda")
    for k, updates in ((1, 64), (4, 16), (16, 4), (64, 1)):
        assert re.search(rf"k={k:>2}: +[0-9.]+ ms per epoch, +{updates} updates of {32 * k} samples",
                         text), text
    # A model's own train_step with gaviz.Accumulator and FlushAtEpochEnd: the big batch's run.
    text = shown_by(notebook, "max |w_accumulated - w_big_batch|")
    (gap,) = numbers_after(text, "max |w_accumulated - w_big_batch| =")
    assert "updates: 15 and 15" in text and gap < 1e-5, text


def _lesson10(notebook):
    # The classic distributed loop is Keras's built-in (sum / k) and lands away from the single
    # device's big batch; the same loop with the learner's replica step on gaviz.Accumulator
    # lands on it.
    text = shown_by(notebook, "max |w_classic - w_single_device|")
    (classic,) = numbers_after(text, "max |w_classic - w_single_device| =")
    (moved,) = numbers_after(text, "training moved them up to")
    (builtin,) = numbers_after(text, "max |w_classic - w_keras_builtin| =")
    assert classic > 1e-2 and classic > 0.1 * moved and builtin < 1e-5, text
    text = shown_by(notebook, "max |w_accumulator - w_single_device|")
    (fixed,) = numbers_after(text, "max |w_accumulator - w_single_device| =")
    assert "updates: 16" in text and fixed < 1e-5, text


def _lesson13(notebook):
    # The capstone: the learner's token loop and gaviz's trainer land on Model.fit at the big
    # batch, Adam and the Embedding's rows included (to float32 rounding, which Adam amplifies
    # where a gradient is tiny); Keras's built-in is the mean-of-means rule and lands visibly
    # away; verify ends the lesson with "Equal".
    (yours,) = numbers_after(shown_by(notebook, "your loop: max"), "max |w - w_big_batch| =")
    (ours,) = numbers_after(shown_by(notebook, "gaviz: {len(history)}"), "max |w - w_big_batch| =")
    text = shown_by(notebook, "Keras's built-in: max")
    (builtin,) = numbers_after(text, "max |w - w_big_batch| =")
    (rule,) = numbers_after(text, "against the mean of micro-batch means:")
    assert yours < 1e-4 and ours < 1e-4 and rule < 1e-4, text
    assert builtin > 100 * max(yours, ours), text
    text = shown_by(notebook, ").verify(micro_batches)")
    assert "Equal: gaviz is Model.fit on this model" in text, text


PAYOFFS = {"04": _lesson04, "05": _lesson05, "08": _lesson08, "09": _lesson09, "10": _lesson10,
           "13": _lesson13}


def test_every_lesson_with_exercises_is_run_solved():
    assert [path.name[:2] for path in solved_paths()] == WITH_EXERCISES


@pytest.mark.parametrize("path", solved_paths(), ids=lambda p: p.name)
def test_solved_lesson_keeps_its_word(path):
    inserted = {index: [loaded(name) for name in names]
                for index, names in exercise_solutions(path).items()}
    executed = []
    run = run_lesson(path, executed=executed, inserted=inserted)
    print(f"{path.name} solved: {run.seconds:.1f} s")
    found = faults(path.name, run)
    assert found == [], "\n".join(found)
    notebook = executed[0]
    checked = [cell for cell in notebook.cells
               if cell.cell_type == "code" and CHECK.search(cell.source)]
    for cell in checked:
        text = shown(cell)
        assert text.count("✓ Correct") == len(CHECK.findall(cell.source)), text
        assert "Incorrect" not in text and "Not attempted" not in text, text
    if path.name[:2] in PAYOFFS:
        PAYOFFS[path.name[:2]](notebook)


def _defined(source):
    """The names of the functions a cell or a file defines at its top level."""
    return {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("path", solved_paths(), ids=lambda p: p.name)
def test_each_exercise_loads_only_its_own_solution(path):
    """`%load`ing one exercise's solution gives away no later exercise's answer."""
    code = dict(_code_sources(path))
    solutions = exercise_solutions(path)
    for index, names in solutions.items():
        others = set().union(*(_defined(code[other]) for other in solutions if other != index))
        for name in names:
            given = _defined((LESSONS / "solutions" / name).read_text())
            assert _defined(code[index]) <= given, (path.name, name)
            assert not given & others, (path.name, name, given & others)


def _exercises():
    for module in sorted(LESSONS.glob("[0-9][0-9]_*.ipynb")):
        try:
            lesson = importlib.import_module(f"gaviz.course.lesson{module.name[:2]}")
        except ModuleNotFoundError:
            continue
        yield from (value for value in vars(lesson).values() if isinstance(value, Exercise))


def test_solution_shows_the_solutions_code(capsys, monkeypatch, tmp_path):
    """As Kaggle Learn's: `.solution()` shows the code, with the `%load` line that pastes it,
    from any folder (the kernel's is lessons/, a script's may be anywhere)."""
    monkeypatch.chdir(tmp_path)
    exercises = list(_exercises())
    assert len(exercises) >= len(WITH_EXERCISES)
    for exercise in exercises:
        exercise.solution()
        text = capsys.readouterr().out
        assert f"%load solutions/{exercise.solution_file}" in text, text
        assert (LESSONS / "solutions" / exercise.solution_file).read_text().strip() in text
