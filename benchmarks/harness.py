"""What every benchmark shares: fair timing, the machine's description, results files.

Timing method (the same for every benchmark):

- each contestant runs once untimed first (tracing, first-call allocations);
- then the contestants take turns, one timed run each per round, in an order
  rotated every round, so a slow spell of the machine hits all of them;
- the garbage collector runs before each timed run and is off during it
  (``timeit`` does the same), so one contestant's garbage is not collected
  in another's time;
- we report medians, and ratios of medians taken in the same run.

Each benchmark script writes one JSON file (see :func:`write_result`);
``report.py`` turns the files into ``results.md``, ``results.png`` and the
README's headline table.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def alternate(
    contestants: dict[str, Callable[[], object]], rounds: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Times each contestant ``rounds`` times, taking turns; returns seconds per run.

    Args:
        contestants: name -> a function running one unit of work (an epoch).
        rounds: timed runs per contestant.
        warmup: untimed runs per contestant before the first timed one.
    """
    if rounds < 1:
        raise ValueError(f"`rounds` must be an integer >= 1. Received: rounds={rounds}")
    names = list(contestants)
    for name in names:
        for _ in range(warmup):
            contestants[name]()
    times = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(contestants[name]))
    return times


def timed(work: Callable[[], object]) -> float:
    """Seconds one call of ``work`` takes, with the garbage collector off."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    finally:
        gc.enable()


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def environment() -> dict:
    """Versions and machine, recorded with every result."""
    import keras
    import tensorflow as tf

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
    }


def target(what: str, measured: float, limit: float, unit: str, at_least: bool) -> dict:
    """A target and whether this run met it (``measured >= limit`` or ``<=``)."""
    met = measured >= limit if at_least else measured <= limit
    return {
        "what": what,
        "measured": measured,
        "limit": limit,
        "unit": unit,
        "at_least": at_least,
        "met": bool(met),
    }


def write_result(path: str, name: str, title: str, setup: str, columns: list[str],
                 rows: list[list], **extra) -> dict:
    """Writes one benchmark's result as JSON and returns it.

    ``rows`` are the table's cells (numbers are formatted by the report);
    ``extra`` holds ``targets`` (from :func:`target`), ``notes`` (strings)
    and ``plot`` (data for the report's figure).
    """
    result = {
        "name": name,
        "title": title,
        "setup": setup,
        "columns": columns,
        "rows": rows,
        "environment": environment(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "quick": "--quick" in sys.argv,
        **extra,
    }
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "w") as handle:
        json.dump(result, handle, indent=1)
    return result


def add_common_arguments(parser, default_json: str):
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and few rounds: checks the script works, measures nothing")
    parser.add_argument("--json", default=default_json, help="where to write the result")
