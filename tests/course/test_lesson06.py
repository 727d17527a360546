"""Lesson 06's checkers pass the solutions and name the usual mistakes."""

import importlib
import pathlib
import sys

from gaviz.course import lesson06

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.06_window_sizes")
end_solution = importlib.import_module("solutions.06_end_of_epoch")


def test_the_solutions_pass():
    outcome = lesson06.end_of_epoch.evaluate(end_solution.end_of_epoch)
    assert outcome.status == "pass", outcome.message
    assert lesson06.window_sizes.evaluate(solution.window_sizes).status == "pass"


def test_the_stubs_are_not_attempted():
    def end_of_epoch(window, update):
        ...  # your code here

    def window_sizes(num_samples, micro_batch_size, accumulation_steps, tail, epochs=1):
        return None

    assert lesson06.end_of_epoch.evaluate(end_of_epoch).status == "not attempted"
    assert lesson06.window_sizes.evaluate(window_sizes).status == "not attempted"


def test_applying_an_empty_window_is_a_fault():
    outcome = lesson06.end_of_epoch.evaluate(lambda window, update: update())
    assert outcome.status == "fail" and "0 / 0 is NaN" in outcome.message


def test_applying_twice_is_a_fault():
    def end_of_epoch(window, update):
        if window.micro_steps:
            update()
            update()

    outcome = lesson06.end_of_epoch.evaluate(end_of_epoch)
    assert outcome.status == "fail" and "called 2 times" in outcome.message


def test_carry_without_joining_epochs_is_a_fault():
    def window_sizes(num_samples, micro_batch_size, accumulation_steps, tail, epochs=1):
        if tail == "carry":
            tail = "drop"
        return solution.window_sizes(num_samples, micro_batch_size, accumulation_steps, tail,
                                     epochs)

    outcome = lesson06.window_sizes.evaluate(window_sizes)
    assert outcome.status == "fail"
    assert "(900, 32, 8, 'carry', 2) should be [256, 256, 256, 228, 256, 256, 256]" in outcome.message


def test_counting_samples_instead_of_micro_batches_says_why():
    """Issue #41: "should be [256, 256, 256, 232], got [256, 256, 256]" said no reason."""
    def window_sizes(num_samples, micro_batch_size, accumulation_steps, tail, epochs=1):
        window = micro_batch_size * accumulation_steps  # PITFALL: windows of samples
        full, rest = divmod(num_samples * epochs, window)
        return [window] * full + ([rest] if rest and tail == "flush" else [])

    outcome = lesson06.window_sizes.evaluate(window_sizes)
    assert outcome.status == "fail", outcome
    assert "should be [256, 256, 256, 232], got [256, 256, 256]" in outcome.message
    assert "1000 samples make 32 micro-batches" in outcome.message


def test_diagnoses_subject_is_named_in_the_courses_words():
    """Issue #60: the message named exact_with.<locals>.with_your_piece."""
    def end_of_epoch(window, update):
        if window.micro_steps:
            for accumulator in window.accumulators:
                accumulator.assign(accumulator * 0)
            update()

    outcome = lesson06.end_of_epoch.evaluate(end_of_epoch)
    assert outcome.status == "fail", outcome
    assert "<locals>" not in outcome.message
    assert "lesson 03's loop with your end_of_epoch against the exact trainer" in outcome.message


def test_flush_joining_two_epochs_is_named():
    def joins(num_samples, micro_batch_size, accumulation_steps, tail="flush", epochs=1):
        full, rest = divmod(num_samples, micro_batch_size)
        batches = ([micro_batch_size] * full + ([rest] if rest else [])) * epochs
        windows = [batches[i:i + accumulation_steps]
                   for i in range(0, len(batches), accumulation_steps)]
        return [sum(w) for w in windows if len(w) == accumulation_steps or tail == "flush"]

    outcome = lesson06.window_sizes.evaluate(joins)
    assert outcome.status == "fail", outcome
    assert "window_sizes(100, 10, 3, 'flush', 2) should be" in outcome.message
    assert "only carry joins two epochs" in outcome.message
