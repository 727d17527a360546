"""5. Dashboard responsiveness: comparing k in {1, 2, 4, 8} on the default preset.

Drives the dashboard headless, as the Run button does, and reports the time
from Run to the first plotted point and to the end of all four runs (median
of a few repetitions). Each repetition builds fresh models, so tracing is
included, as a learner clicking Run would see it: no warm-up here, on purpose.

    python benchmarks/bench_dashboard.py [--repeats 3] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time

import harness

import gaviz

FIRST_POINT_LIMIT, FINISH_LIMIT = 3.0, 20.0


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
    if first is None:  # finished between two polls
        first = total
    updates = sum(len(r.history) for r in board.results)
    failed = [r.error for r in board.results if r.error]
    if failed:
        raise RuntimeError(f"the dashboard failed: {failed}")
    return first, total, updates


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    harness.add_common_arguments(parser, "benchmarks/results/dashboard.json")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats

    runs = [one_run() for _ in range(repeats)]
    first = statistics.median(r[0] for r in runs)
    total = statistics.median(r[1] for r in runs)
    preset = gaviz.demo.PRESETS["regression"]
    result = harness.write_result(
        args.json,
        name="dashboard",
        title="5. Dashboard: comparing k in {1, 2, 4, 8}",
        setup=(
            f"`gaviz.dashboard()` default preset ({preset['samples']} samples), k in 1 2 4 8, "
            f"driven headless as the Run button does; median of {repeats} runs, tracing "
            "included (fresh models each run, as a learner sees it)."
        ),
        columns=["measure", "seconds", "target (s)"],
        rows=[
            ["Run to the first plotted point", first, FIRST_POINT_LIMIT],
            [f"Run to all four runs finished ({runs[0][2]} updates)", total, FINISH_LIMIT],
        ],
        targets=[
            harness.target("Run to the first point", first, FIRST_POINT_LIMIT, "s",
                           at_least=False),
            harness.target("Run to all four runs finished", total, FINISH_LIMIT, "s",
                           at_least=False),
        ],
        plot={"first": [r[0] for r in runs], "total": [r[1] for r in runs]},
    )
    for row in result["rows"]:
        print(f"{row[0]:<50} {row[1]:6.2f} s (target < {row[2]:.0f} s)")


if __name__ == "__main__":
    main()
