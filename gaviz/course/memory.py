"""Lesson 01's memory measurements on a CPU: freed memory handed back at once.

The C library of Linux (glibc) keeps large freed blocks for reuse instead of
returning them to the system. A second measurement of the same work would
then find its memory already resident and report almost nothing.
:func:`return_freed_memory_at_once` asks glibc to give every freed block above
a threshold straight back, so that each measurement starts from the same
place.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: glibc's ``mallopt`` parameter number for the size above which an allocation gets
#: pages of its own, returned to the system when freed (``M_MMAP_THRESHOLD``).
_M_MMAP_THRESHOLD = -3


def return_freed_memory_at_once(threshold_bytes: int = 64 * 1024) -> bool:
    """Asks the C library to return freed blocks above ``threshold_bytes`` to the system.

    Returns:
        True where it could (Linux with glibc); False elsewhere, where later
        measurements of the same work may come out too small.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold_bytes))
    except (OSError, AttributeError, TypeError):
        return False
