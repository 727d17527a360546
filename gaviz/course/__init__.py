"""The course's own code: the learner's loop, shared helpers, and the exercises' checkers.

``import gaviz.course`` is for the lessons; ``import gaviz`` does not load it.

- :mod:`gaviz.course.loop`: lesson 03's accumulation loop, written once, with
  its pieces as arguments (lessons 04-06 swap one piece each), and helpers the
  lessons share (``flat_weights``, ``max_difference``, ``update_sizes``).
- :mod:`gaviz.course.exercise`: ``Exercise`` (``check``, ``hint``, ``solution``).
- :mod:`gaviz.course.repairs`: the fix-it lessons' check (lesson 03's loop with the
  learner's piece, exact by ``gaviz.diagnose``).
- :mod:`gaviz.course.graph`: lesson 08's Python drivers around the learner's graph
  window, and a fair clock; :mod:`gaviz.course.gpu`: the capstone's device, and device sizing.
- :mod:`gaviz.course.corpus`: the capstone's text, the standard library's own source lines as
  tokens; :mod:`gaviz.course.language_model`: its model, big-batch reference and sampling.
- :mod:`gaviz.course.memory`: lesson 01's freed memory handed back at once, for measuring.
- :mod:`gaviz.course.text`: reports printed wrapped between words (``print_wrapped``);
  :mod:`gaviz.course.figures`: log axes labelled in plain numbers (``readable_log_axis``).
- ``gaviz.course.lessonNN``: each lesson's exercises, e.g.
  ``lesson04.reset.check(reset)``.
"""

from gaviz.course.exercise import Exercise, Incorrect, NotAttempted, Outcome
from gaviz.course.figures import readable_log_axis
from gaviz.course.loop import (
                               Window,
                               accumulation_epoch,
                               apply_partial_window,
                               divide_by_count,
                               make_accumulators,
                               max_difference,
                               penalty_gradients,
                               summed_loss,
                               update_sizes,
                               zero_accumulators,
)
from gaviz.course.text import print_wrapped, wrapped
from gaviz.gallery.measure import flat_weights

__all__ = [
    "Exercise",
    "Incorrect",
    "NotAttempted",
    "Outcome",
    "Window",
    "accumulation_epoch",
    "apply_partial_window",
    "divide_by_count",
    "flat_weights",
    "make_accumulators",
    "max_difference",
    "penalty_gradients",
    "print_wrapped",
    "readable_log_axis",
    "summed_loss",
    "update_sizes",
    "wrapped",
    "zero_accumulators",
]
