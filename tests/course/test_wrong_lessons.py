"""Lessons run with a learner's wrong answers in them (issue #49's walk): the check names the
fault in a few lines, and no later cell shows red or uses the wrong answer as if it passed.

Each runs a whole lesson: end-to-end (``make test-e2e``).
"""

import pathlib

import pytest
from lesson_runner import LESSONS, run_lesson

pytestmark = pytest.mark.e2e

LESSON_08 = LESSONS / "08_your_own_graph_trainer.ipynb"
LESSON_09 = LESSONS / "09_gaviz_in_your_project.ipynb"

#: make_window with a tf.cond whose branches return different things: TensorFlow's error is
#: fifty lines of generated code.
UNEQUAL_BRANCHES = '''
def make_window(model, optimizer, loss, element_spec):
    steps = make_graph_steps(model, optimizer, loss, element_spec)

    @tf.function
    def window(iterator, accumulation_steps):
        read = tf.constant(0)
        for _ in tf.range(accumulation_steps):
            batch = iterator.get_next_as_optional()
            tf.cond(batch.has_value(), lambda: steps.micro_step(*batch.get_value()) or read,
                    lambda: None)
            read += tf.cast(batch.has_value(), tf.int32)
        tf.cond(read > 0, steps.update, lambda: None)
        return read

    return window
'''
#: make_window reading one micro-batch per call: it runs, and the check refuses it.
ONE_PER_CALL = '''
def make_window(model, optimizer, loss, element_spec):
    steps = make_graph_steps(model, optimizer, loss, element_spec)

    @tf.function
    def window(iterator, accumulation_steps):
        batch = iterator.get_next_as_optional()
        tf.cond(batch.has_value(), lambda: steps.micro_step(*batch.get_value()), lambda: None)
        read = tf.cast(batch.has_value(), tf.int32)
        tf.cond(read > 0, steps.update, lambda: None)
        return read

    return window
'''


def _cell_index(path, words):
    import json

    cells = json.loads(pathlib.Path(path).read_text())["cells"]
    return next(i for i, cell in enumerate(cells) if words in "".join(cell["source"]))


def _texts(cell):
    texts = [output.get("text", "") for output in cell.outputs]
    return "".join(texts + [str(v) for output in cell.outputs
                            for v in output.get("data", {}).values()])


@pytest.mark.parametrize("answer, fault", [(UNEQUAL_BRANCHES, "two branches of a tf.cond"),
                                           (ONE_PER_CALL, "one call read 1 micro-batch")],
                         ids=["unequal-branches", "one-per-call"])
def test_lesson_08_names_a_wrong_window_and_does_not_time_it(answer, fault):
    stub = _cell_index(LESSON_08, "def make_window(model, optimizer, loss, element_spec):")
    executed = []
    run = run_lesson(LESSON_08, executed=executed, inserted={stub: [answer]})
    assert run.red == [], run.red
    cells = executed[0].cells
    check = next(c for c in cells if "lesson08.window.check(make_window)" in c.source)
    said = _texts(check)
    assert fault in said and "ag__" not in said and len(said) < 2000, said
    timing = next(c for c in cells if "lesson08.window.passes(make_window)" in c.source)
    assert "make_window does not pass yet" in _texts(timing)
    assert "ms per epoch" not in _texts(timing)


def test_lesson_09_with_failed_checks_shows_no_red_later():
    """A model for the wrong input (fit traces, then fails) checked three times, and a
    History read per update: later cells (a checkpoint's trainers, a VAE) show no warning."""
    wrong = '''
def make_my_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def fit_accumulated(model, x, y, validation_data):
    return gaviz.AccumulationTrainer(model, accumulation_steps=8).fit(
        x, y, batch_size=32, epochs=3, validation_data=validation_data, verbose=0)


def best_epoch(history):
    return history.loss.index(min(history.loss)) + 1
'''
    check = "lesson09.your_model.check(make_my_model, fit_accumulated, best_epoch)"
    stub = _cell_index(LESSON_09, "def make_my_model():")
    run = run_lesson(LESSON_09, inserted={stub: [wrong], stub + 1: [check, check]})
    assert run.red == [], run.red
