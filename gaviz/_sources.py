"""Whether gaviz's own source files changed on disk since they were imported.

AutoGraph converts a function by reading its source from disk at the line
Python compiled it from. If the file changed after the import (an editable
install edited while a kernel runs, a ``git pull`` under a running notebook),
it reads whatever now stands at that line, often another function, and puts
that into the graph: the trainer then fails with an error that names the
wrong code (``micro_batch_size must be an integer``, ``a Tensor as a Python
bool``), or runs the wrong code. :func:`check_unchanged` turns that into one
clear error before training starts.
"""

from __future__ import annotations

import os
import sys

#: path -> (modification time in ns, size) of each gaviz module when recorded.
_RECORDED: dict[str, tuple[int, int]] = {}


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def record_loaded() -> None:
    """Records the files of every gaviz module imported so far (once each)."""
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name == "gaviz" or name.startswith("gaviz.")) and path and path not in _RECORDED:
            stamp = _stamp(path)
            if stamp is not None:
                _RECORDED[path] = stamp


def changed() -> list[str]:
    """The recorded files whose time or size differs from when they were recorded."""
    return [path for path, stamp in _RECORDED.items() if _stamp(path) != stamp]


def check_unchanged() -> None:
    """Raises RuntimeError if a gaviz source file changed since its import.

    Raises:
        RuntimeError: naming the files; the fix is a fresh process (restart
            the kernel), which imports the files as they are now.
    """
    files = changed()
    record_loaded()  # modules imported since, as they are now
    if files:
        raise RuntimeError(
            "gaviz's source changed on disk since this process imported it: "
            f"{', '.join(files)}. TensorFlow's AutoGraph reads a function's source "
            "from disk when it builds a graph, and would now read other lines than "
            "Python runs. Restart the kernel (or the process) to import gaviz afresh."
        )
