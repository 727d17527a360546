"""Checks of plain arguments, shared by every part of gaviz and loading nothing
heavy (no TensorFlow): each names the argument, what it expects and what
arrived, in Keras's message style."""

from __future__ import annotations

import numbers


def check_one_of(name, value, options):
    """Checks that ``value`` is one of ``options`` (a tuple, or a dict's keys)."""
    if value not in options:
        raise ValueError(
            f"`{name}` must be one of {tuple(options)}. Received: {name}={value!r}"
        )
    return value


def check_positive_int(name, value):
    return check_int_at_least(name, value, 1)


def check_int_at_least(name, value, minimum):
    # bool is an int subclass: True would silently mean 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}"
        )
    return int(value)
