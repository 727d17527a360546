"""Lesson 03's checkers pass the solution, call the stubs not attempted, and name
the fault of realistic wrong window arithmetic; the solution's finish_window is
a piece accumulation_epoch takes, exact against Model.fit."""

import importlib
import pathlib
import sys

import keras
import tensorflow as tf

import gaviz
from gaviz.course import accumulation_epoch, lesson03, max_difference

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.03_window")


def stub_accumulate(accumulators, gradients):
    ...  # your code here


def stub_finish_window(accumulators, sample_count):
    ...  # your code here


def fails_with(exercise, answer, *expected):
    outcome = exercise.evaluate(answer)
    assert outcome.status == "fail", outcome
    for text in expected:
        assert text in outcome.message, outcome.message


def test_the_solution_passes():
    assert lesson03.accumulate.evaluate(solution.accumulate).status == "pass"
    outcome = lesson03.finish_window.evaluate(solution.finish_window)
    assert outcome.status == "pass", outcome
    assert "5, 27 and 8 samples" in outcome.message


def test_the_stubs_are_not_attempted():
    assert lesson03.accumulate.evaluate(stub_accumulate).status == "not attempted"
    assert lesson03.finish_window.evaluate(stub_finish_window).status == "not attempted"


# ------------------------------------------------------------- accumulate


def test_a_new_list_instead_of_adding_in_place_is_named():
    fails_with(lesson03.accumulate, lambda accs, grads: [a + g for a, g in zip(accs, grads)],
               "still hold zeros", "assign_add")


def test_assign_instead_of_assign_add_is_named():
    def assigns(accumulators, gradients):
        if len(accumulators) != len(gradients):
            raise ValueError("lengths")
        for accumulator, gradient in zip(accumulators, gradients):
            accumulator.assign(gradient)
        return accumulators

    fails_with(lesson03.accumulate, assigns, "only the second gradients", "`assign` replaces")


def test_no_length_check_is_named():
    def trusting(accumulators, gradients):
        for accumulator, gradient in zip(accumulators, gradients):
            accumulator.assign_add(gradient)
        return accumulators

    fails_with(lesson03.accumulate, trusting, "raised nothing: raise ValueError")


def test_rebinding_the_lists_entries_is_read_back_from_the_variables():
    """Issue #60: `accumulators[i] = accumulators[i] + g` passed; the variables stayed zero."""
    def rebinds(accumulators, gradients):
        if len(accumulators) != len(gradients):
            raise ValueError("lengths")
        for i, gradient in enumerate(gradients):
            accumulators[i] = accumulators[i] + gradient
        return accumulators

    fails_with(lesson03.accumulate, rebinds, "replaced the list's entries",
               "the variables you were given still hold zeros", "assign_add")


def test_adding_before_refusing_mismatched_lists_is_named():
    def adds_first(accumulators, gradients):
        for accumulator, gradient in zip(accumulators, gradients):
            accumulator.assign_add(gradient)
        if len(accumulators) != len(gradients):
            raise ValueError("lengths")
        return accumulators

    fails_with(lesson03.accumulate, adds_first, "added into the first accumulator before raising")


def test_forgetting_to_return_is_named():
    def silent(accumulators, gradients):
        solution.accumulate(accumulators, gradients)

    fails_with(lesson03.accumulate, silent, "return `accumulators`")


# ------------------------------------------------------------- finish_window


def test_an_undivided_window_is_named():
    fails_with(lesson03.finish_window, lambda accs, count: [tf.identity(a) for a in accs],
               "the gradients equal the sums", "divide each accumulator by `sample_count`")


def test_a_reset_inside_finish_window_is_named():
    def resets(accumulators, sample_count):
        gradients = solution.finish_window(accumulators, sample_count)
        for accumulator in accumulators:
            accumulator.assign(tf.zeros_like(accumulator))
        return gradients

    fails_with(lesson03.finish_window, resets, "it changed the accumulators", "lesson 04")


def test_dividing_in_place_is_named():
    def in_place(accumulators, sample_count):
        for accumulator in accumulators:
            accumulator.assign(accumulator / sample_count)
        return accumulators

    fails_with(lesson03.finish_window, in_place, "it changed the accumulators")


def test_nan_for_an_empty_window_is_named():
    fails_with(lesson03.finish_window, lambda accs, count: [a / count for a in accs],
               "an empty window (sample_count 0) gave [nan nan]", "divide_no_nan")


def test_a_count_below_one_is_divided_by():
    """A window's count is its samples' weights summed: below 1 when they are small."""
    fails_with(lesson03.finish_window, lambda accs, count: [a / max(count, 1) for a in accs],
               "sample_count 0.5", "weights can sum to less than 1")


def test_a_generator_of_gradients_passes():
    """The loop zips what finish_window returns: any iterable of gradients in order works."""
    def lazily(accumulators, sample_count):
        return (tf.math.divide_no_nan(a, tf.cast(sample_count, a.dtype)) for a in accumulators)

    assert lesson03.finish_window.evaluate(lazily).status == "pass"


def test_the_solution_is_a_piece_of_the_exact_loop():
    x, y = gaviz.demo.make_data(32 * 4 * 2, seed=2)
    micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = gaviz.demo.make_model(seed=2)
    accumulation_epoch(model, keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError(),
                       micro_batches, 4, finish_window=solution.finish_window)
    reference = gaviz.demo.make_model(seed=2)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    reference.fit(x, y, batch_size=128, epochs=1, shuffle=False, verbose=0)
    assert max_difference(model, reference) < 1e-6
    assert max_difference(model, gaviz.demo.make_model(seed=2)) > 1e-3  # it trained


def test_hints_and_solution(capsys):
    lesson03.finish_window.hint()
    lesson03.finish_window.solution()
    shown = capsys.readouterr().out
    assert "1 of 3" in shown and "%load solutions/03_window.py" in shown
