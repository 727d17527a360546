"""Lesson 06's exercises: repair the loop's end of epoch, and predict each update's size."""

import keras

import gaviz
from gaviz.course.exercise import Exercise, Incorrect, attempted
from gaviz.course.loop import Window
from gaviz.course.repairs import exact_with, require_attempted


def _calls(end_of_epoch, micro_steps, samples) -> int:
    calls = []

    def update():  # the loop's update: named, so a call with arguments says "update() takes 0"
        calls.append(1)

    update.__qualname__ = "update"  # not _calls.<locals>.update, in the learner's error

    end_of_epoch(Window(accumulators=[], sample_count=float(samples), micro_steps=micro_steps),
                 update)
    return len(calls)


#: (micro-batches waiting, their samples, why): tails of every size an epoch can leave, one
#: micro-batch included, and samples that differ from the micro-batches, so neither number
#: stands in for the other.
_TAILS = [(1, 7.0, "a tail of one micro-batch is still a window: its samples count"),
          (2, 40.0, "a partial window"),
          (5, 123.0, "a partial window")]


def _check_end_of_epoch(end_of_epoch) -> str:
    require_attempted(end_of_epoch,
                      "end_of_epoch does nothing yet, so the partial window is still dropped")
    for micro_steps, samples, why in _TAILS:
        calls = _calls(end_of_epoch, micro_steps, samples)
        if calls != 1:
            raise Incorrect(f"with {micro_steps} micro-batch{'es' * (micro_steps > 1)} "
                            f"({samples:g} samples) waiting, update() should be called once; it "
                            f"was called {calls} time{'s' * (calls != 1)}: {why}")
    if _calls(end_of_epoch, 0, 0.0) != 0:
        raise Incorrect("with an empty window (micro_steps 0) nothing should be applied: its "
                        "sample count is 0, and 0 / 0 is NaN")
    exact_with(end_of_epoch=end_of_epoch)
    return ("the partial window is applied, a tail of one micro-batch included, an empty one is "
            "not, and diagnose finds lesson 03's loop with your end_of_epoch exact")


#: (arguments, expected, why): hand-worked cases, one per policy and edge. Windows count
#: micro-batches, not samples: a micro-batch shorter than the others is still one of k.
_WINDOW_CASES = [
    ((100, 10, 3, "flush"), [30, 30, 30, 10],
     "100 samples make 10 micro-batches of 10: three full windows of 3, then a partial window "
     "of 1 micro-batch, applied"),
    ((100, 10, 3, "drop"), [30, 30, 30],
     "100 samples make 10 micro-batches of 10: three full windows of 3; the partial window of "
     "1 micro-batch is dropped"),
    ((100, 10, 3, "carry", 2), [30] * 6,
     "2 epochs of 10 micro-batches make 20, carried across the epoch's end: six full windows "
     "of 3; the last 2 micro-batches are still waiting when training stops, never applied"),
    ((1000, 32, 8, "drop"), [256, 256, 256, 232],
     "1000 samples make 32 micro-batches (31 of 32 samples, then one of 8): four full windows "
     "of 8 micro-batches, so nothing is dropped, and the fourth holds 7 x 32 + 8 = 232 samples"),
    ((100, 10, 3, "flush", 2), [30, 30, 30, 10] * 2,
     "flush and drop cut each epoch on its own: each of the 2 epochs makes three full windows "
     "of 3 micro-batches and a partial one of 1, applied; only carry joins two epochs' "
     "micro-batches in a window"),
    ((900, 32, 8, "carry", 2), [256, 256, 256, 228, 256, 256, 256],
     "900 samples make 29 micro-batches (28 of 32, one of 4); carried, the fourth window takes "
     "epoch 1's last 5 (4 x 32 + 4) and epoch 2's first 3 (3 x 32): 228 samples; then three "
     "full windows, and 2 micro-batches still waiting at the end"),
]


def _check_window_sizes(window_sizes) -> str:
    attempted(window_sizes(100, 10, 3, "flush"))
    for arguments, expected, why in _WINDOW_CASES:
        got = window_sizes(*arguments)
        if list(got) != expected:
            raise Incorrect(f"window_sizes{arguments} should be {expected}, got {got}: {why}")
    x, y = gaviz.demo.make_data(900, seed=0)
    for tail in ("flush", "drop", "carry"):
        trainer = gaviz.AccumulationTrainer(gaviz.demo.make_model(seed=0),
                                            keras.optimizers.SGD(0.05), "mse", 8, tail=tail)
        history = trainer.fit(gaviz.demo.make_dataset(x, y, 32), epochs=2, verbose=0)
        if list(window_sizes(900, 32, 8, tail, 2)) != history.samples:
            raise Incorrect(f"tail={tail!r}: the trainer's updates were "
                            f"{history.samples}")
    return "every policy matches the hand-worked cases and the trainer's own histories"


end_of_epoch = Exercise(
    "06 end_of_epoch", _check_end_of_epoch,
    hints=["`window.micro_steps` says how many micro-batches the window holds.",
           "Call `update()` only when that is not zero: it divides by the window's sample count."],
    solution_file="06_end_of_epoch.py")

window_sizes = Exercise(
    "06 window_sizes", _check_window_sizes,
    hints=["First list one epoch's micro-batch sizes: full ones, then the remainder if any.",
           "flush and drop cut each epoch on its own; carry joins all epochs' micro-batches into "
           "one list before cutting it into windows of k, then keeps only the full ones."],
    solution_file="06_window_sizes.py")
