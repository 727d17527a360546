"""The course's framework: exercises report pass, fault or not attempted; the learner's
loop is exact against Model.fit, and each broken piece is what diagnose names."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

import gaviz
from gaviz.course import Exercise, Incorrect, NotAttempted, accumulation_epoch, max_difference


def _checker(answer):
    if answer is None:
        raise NotAttempted()
    if answer != 42:
        raise Incorrect(f"expected the answer to everything, got {answer}")
    return "the answer to everything"


EXERCISE = Exercise("00 answer", _checker, ["think of a famous number", "six times seven"],
                    "00_answer.py")


def test_an_exercise_reports_pass_fault_and_not_attempted():
    assert EXERCISE.evaluate(42).status == "pass" and EXERCISE.evaluate(42)
    fault = EXERCISE.evaluate(41)
    assert fault.status == "fail" and "got 41" in fault.message and not fault
    assert EXERCISE.evaluate(None).status == "not attempted"


def test_code_that_raises_is_a_fault_naming_the_error():
    def checker(function):
        return str(function())

    outcome = Exercise("00 raise", checker, ["h"], "x.py").evaluate(lambda: 1 / 0)
    assert outcome.status == "fail" and "ZeroDivisionError" in outcome.message


def test_a_stub_raising_not_implemented_is_not_attempted():
    def stub():
        raise NotImplementedError

    outcome = Exercise("00 stub", lambda f: f(), ["h"], "x.py").evaluate(stub)
    assert outcome.status == "not attempted"


def test_hints_come_in_order_and_the_solution_names_its_file(capsys):
    exercise = Exercise("00 answer", _checker, ["first", "second"], "00_answer.py")
    exercise.hint(), exercise.hint(), exercise.hint()
    shown = capsys.readouterr().out.splitlines()
    assert ["1 of 2: first" in shown[0], "2 of 2: second" in shown[1],
            "2 of 2" in shown[2]] == [True] * 3
    exercise.solution()
    assert "%load solutions/00_answer.py" in capsys.readouterr().out


def test_outcomes_render_coloured_html():
    html = EXERCISE.evaluate(41)._repr_html_()
    assert "Incorrect" in html and "got 41" in html and "color" in html


def test_a_demonstrated_wrong_answer_is_labelled_as_one_not_as_the_learners_fault():
    shown = EXERCISE.demonstrate(41, what="the likeliest slip, 41")
    assert shown.status == "demonstration" and not shown
    assert "Incorrect" not in str(shown) and "✗" not in shown._repr_html_()
    assert str(shown).startswith("◇ Demonstration, not your answer (00 answer): the likeliest "
                                 "slip, 41. The check says: expected the answer to everything, got 41")
    with pytest.raises(ValueError, match="42 passes"):
        EXERCISE.demonstrate(42, what="42")


def test_passes_reuses_the_last_check_of_the_same_answer(capsys):
    calls = []

    def checker(answer):
        calls.append(answer)
        return _checker(answer)

    exercise = Exercise("00 counted", checker, ["h"], "x.py")
    exercise.check(42)
    assert "Correct" in capsys.readouterr().out
    assert exercise.passes(42) and calls == [42]  # the check's outcome, not a second run
    assert not exercise.passes(None) and calls == [42, None]  # another answer: evaluated
    assert capsys.readouterr().out == ""  # passes shows nothing


def test_the_learners_loop_equals_model_fit_on_the_big_batch():
    x, y = gaviz.demo.make_data(32 * 4 * 3 + 40, seed=1)  # 3 full windows and a ragged tail
    micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = gaviz.demo.make_model(seed=1)
    updates = accumulation_epoch(model, keras.optimizers.SGD(0.1),
                                 keras.losses.MeanSquaredError(), micro_batches, 4)
    reference = gaviz.demo.make_model(seed=1)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    reference.fit(x, y, batch_size=128, epochs=1, shuffle=False, verbose=0)
    assert updates == 4
    assert max_difference(model, reference) < 1e-6
    assert max_difference(model, gaviz.demo.make_model(seed=1)) > 1e-3  # it trained


def test_the_loop_divides_a_masked_window_by_its_real_tokens():
    # Padded sequences sorted by length: micro-batches of very different token counts.
    xt, yt, mask = gaviz.demo.make_token_data(sequences=24, seed=2)
    order = np.argsort(mask.sum(axis=1), kind="stable")
    xt, yt, mask = xt[order], yt[order], mask[order]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = gaviz.demo.make_token_model(seed=2)
    micro_batches = tf.data.Dataset.from_tensor_slices((xt, yt, mask)).batch(4)
    assert accumulation_epoch(model, keras.optimizers.SGD(0.5), loss, micro_batches, 3) == 2
    # Independent reference: each window of 12 sequences as one batch, its
    # total token loss over its real tokens.
    reference = gaviz.demo.make_token_model(seed=2)
    variables, optimizer = reference.trainable_variables, keras.optimizers.SGD(0.5)
    for start in (0, 12):
        xb, yb, mb = xt[start:start + 12], yt[start:start + 12], mask[start:start + 12]
        with tf.GradientTape() as tape:
            per_token = keras.losses.sparse_categorical_crossentropy(yb, reference(xb), from_logits=True)
            objective = tf.reduce_sum(per_token * mb) / mb.sum()
        optimizer.apply_gradients(zip(tape.gradient(objective, variables), variables))
    assert max_difference(model, reference) < 1e-6
    assert max_difference(model, gaviz.demo.make_token_model(seed=2)) > 1e-3  # it trained


def keep_accumulators(accumulators):
    pass  # PITFALL: the next window adds onto this one's sums


def drop_partial_window(window, update):
    pass  # PITFALL: the tail's micro-batches are never applied


def mean_loss(loss, y, y_pred):
    return loss(y, y_pred), 1.0  # PITFALL: each micro-batch a mean, counted once


def undivided(accumulators, sample_count):
    return list(accumulators)  # PITFALL: the window's sum is never divided


@pytest.mark.parametrize("pieces, findings", [
    ({}, []),
    ({"reset": keep_accumulators}, ["missing_reset"]),
    ({"end_of_epoch": drop_partial_window}, ["dropped_tail"]),
    ({"micro_loss": mean_loss}, ["mean_of_means"]),
    ({"micro_loss": mean_loss, "finish_window": undivided}, ["missing_normalization"]),
], ids=["exact", "reset", "tail", "mean_of_means", "undivided"])
def test_diagnose_names_each_broken_piece(pieces, findings):
    diagnosis = gaviz.diagnose(functools.partial(accumulation_epoch, **pieces))
    assert diagnosis.findings == findings


def test_the_loop_counts_a_weight_penalty_once_per_update():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(
        1, kernel_regularizer=keras.regularizers.L2(0.5))])
    before = model.get_weights()[0].copy()
    zeros = tf.data.Dataset.from_tensors((tf.zeros((4, 3)), tf.zeros((4, 1)))).repeat(4)
    accumulation_epoch(model, keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError(), zeros, 4)
    # No data gradient: one update of w <- w - 0.1 * (2 * 0.5 * w).
    np.testing.assert_allclose(model.get_weights()[0], before * 0.9, rtol=1e-6)


def _lesson_exercises():
    import importlib
    import pkgutil

    import gaviz.course

    for info in pkgutil.iter_modules(gaviz.course.__path__):
        if info.name.startswith("lesson"):
            module = importlib.import_module(f"gaviz.course.{info.name}")
            for name, value in vars(module).items():
                if isinstance(value, Exercise):
                    yield info.name[len("lesson"):], name, value


def test_every_exercise_is_used_by_its_lesson_and_has_its_solution():
    import pathlib

    lessons = pathlib.Path(__file__).resolve().parents[2] / "lessons"
    found = list(_lesson_exercises())
    assert found, "no exercises in gaviz.course"
    for number, name, exercise in found:
        (notebook,) = lessons.glob(f"{number}_*.ipynb")
        text = notebook.read_text()
        assert f"lesson{number}.{name}.check(" in text, (notebook.name, name)
        assert (lessons / "solutions" / exercise.solution_file).is_file(), exercise.solution_file
        assert exercise.hints, f"lesson{number}.{name} has no hint"
