"""Dashboard responsiveness: comparing k in {1, 2, 4, 8} on the default preset.

Drives the dashboard headless, as the Run button does, and reports the time
from Run to the first plotted point and to the end of all four runs (median
of a few repetitions; each repetition builds fresh models, so tracing is
included, as a learner clicking Run would see it).

    python benchmarks/bench_dashboard.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gaviz  # noqa: E402


def one_run():
    board = gaviz.dashboard(steps=(1, 2, 4, 8))
    start = time.perf_counter()
    board.run()
    first = None
    while board.running:
        if first is None and board.results[0].history:
            first = time.perf_counter() - start
        time.sleep(0.01)
    board.wait()
    total = time.perf_counter() - start
    updates = sum(len(r.history) for r in board.results)
    return first, total, updates, board.status.value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    runs = [one_run() for _ in range(args.repeats)]
    first = statistics.median(r[0] for r in runs)
    total = statistics.median(r[1] for r in runs)
    print(f"Dashboard, default preset ({gaviz.demo.PRESETS['regression']['samples']} samples, "
          f"3 epochs), k in 1 2 4 8, median of {args.repeats}:")
    print(f"| measure | seconds | target |\n| --- | ---: | ---: |")
    print(f"| Run to first point | {first:.2f} | < 3 |")
    print(f"| Run to all four runs finished ({runs[0][2]} updates) | {total:.2f} | < 20 |")


if __name__ == "__main__":
    main()
