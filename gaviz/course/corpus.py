"""The capstone's text: lines of the Python standard library's own source, as tokens.

Every Python installation carries its standard library's source, so this corpus
needs no download. It reads a fixed, sorted list of modules from
``sysconfig.get_paths()["stdlib"]``, keeps their printable ASCII lines of a
bounded length (indentation stripped), and encodes each line one character per
token, between a start token and an end token. Id 0 is padding: a model built
with ``Embedding(mask_zero=True)`` masks it, and the loss then counts real
tokens only.

The lines are the same on every run of one Python version; another version's
standard library gives other lines (nothing in the lessons depends on which).
"""

from __future__ import annotations

import pathlib
import sysconfig
from typing import NamedTuple

import numpy as np

#: Modules read, in this order: plain Python, present in every CPython 3.10+.
MODULES = ("argparse.py", "calendar.py", "csv.py", "difflib.py", "fractions.py", "heapq.py",
           "shlex.py", "statistics.py", "string.py", "textwrap.py")
PAD, START, END = 0, 1, 2
FIRST_CHARACTER = 3  # ids 3.. are the printable ASCII characters, from " " (32) to "~" (126)
PRINTABLE = "".join(chr(code) for code in range(32, 127))
VOCABULARY_SIZE = FIRST_CHARACTER + len(PRINTABLE)


def stdlib_folder() -> pathlib.Path:
    """Where this Python keeps its standard library's source."""
    return pathlib.Path(sysconfig.get_paths()["stdlib"])


def source_lines(min_length: int = 8, max_length: int = 64, modules=MODULES) -> list[str]:
    """The lines of ``modules`` (in the standard library) worth predicting, in file order.

    A line is kept when, with its indentation and trailing spaces removed, it
    has ``min_length`` to ``max_length`` characters, all printable ASCII, and is
    not a comment.

    Raises:
        ValueError: for lengths that select nothing (``1 <= min_length <= max_length``).
        FileNotFoundError: when this Python carries no source for a module.
    """
    if not (isinstance(min_length, int) and isinstance(max_length, int)
            and 1 <= min_length <= max_length):
        raise ValueError("`min_length` and `max_length` must be integers with 1 <= min_length "
                         f"<= max_length. Received: min_length={min_length!r}, "
                         f"max_length={max_length!r}")
    lines = []
    for module in modules:
        path = stdlib_folder() / module
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: this Python carries no source for "
                                    f"{module!r}; pass `modules` that it has")
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if (min_length <= len(line) <= max_length and not line.startswith("#")
                    and all(character in PRINTABLE for character in line)):
                lines.append(line)
    return lines


def encode(line: str) -> list[int]:
    """``[START, ids of the characters..., END]``; raises ValueError for a character
    outside printable ASCII."""
    unknown = sorted({character for character in line if character not in PRINTABLE})
    if unknown:
        raise ValueError(f"`line` must hold printable ASCII characters only. Received: "
                         f"line={line!r}, with {unknown!r}")
    return [START, *(FIRST_CHARACTER + PRINTABLE.index(c) for c in line), END]


def decode(tokens) -> str:
    """The characters of ``tokens``; padding, start and end tokens are left out."""
    return "".join(PRINTABLE[int(t) - FIRST_CHARACTER] for t in tokens
                   if int(t) >= FIRST_CHARACTER)


class Lines(NamedTuple):
    """Lines as next-token pairs, each row padded with 0 to the longest line.

    ``inputs[i]`` is line i's tokens without its last, ``targets[i]`` without
    its first: the model reads a prefix and predicts the next token. Both have
    the same real length, so ``inputs != PAD`` marks exactly the real targets.
    """

    inputs: np.ndarray  # int32, (lines, longest line + 1)
    targets: np.ndarray  # int32, the same shape

    @property
    def token_counts(self) -> np.ndarray:
        """Real (unpadded) targets in each line."""
        return (self.targets != PAD).sum(axis=1)


def make_lines(lines, seed: int = 0) -> Lines:
    """``lines`` encoded, shuffled by ``seed`` (a NumPy generator: the same order on
    every machine), as a :class:`Lines` pair of padded arrays."""
    if not lines:
        raise ValueError(f"`lines` must hold at least one line. Received: lines={lines!r}")
    encoded = [encode(line) for line in lines]
    order = np.random.default_rng(seed).permutation(len(encoded))
    width = max(len(tokens) for tokens in encoded) - 1
    inputs = np.zeros((len(encoded), width), np.int32)
    targets = np.zeros((len(encoded), width), np.int32)
    for row, index in enumerate(order):
        tokens = encoded[index]
        inputs[row, :len(tokens) - 1] = tokens[:-1]
        targets[row, :len(tokens) - 1] = tokens[1:]
    return Lines(inputs, targets)


def micro_batches(lines: Lines, micro_batch_size: int):
    """A ``tf.data.Dataset`` of ``(inputs, targets)`` micro-batches, in order, each
    cut to its own longest line: padding is per micro-batch, so micro-batches
    differ in width and in real-token count."""
    import tensorflow as tf

    if not (isinstance(micro_batch_size, int) and micro_batch_size >= 1):
        raise ValueError("`micro_batch_size` must be an integer >= 1. Received: "
                         f"micro_batch_size={micro_batch_size!r}")

    def trim(inputs, targets):  # drop the columns that are padding in every row
        width = tf.reduce_max(tf.reduce_sum(tf.cast(inputs != PAD, tf.int32), axis=1))
        return inputs[:, :width], targets[:, :width]

    dataset = tf.data.Dataset.from_tensor_slices((lines.inputs, lines.targets))
    return dataset.batch(micro_batch_size).map(trim)
