"""Turns the benchmarks' JSON results into results.md, results.png and the README's headlines.

    python benchmarks/report.py [--results benchmarks/results] [--md benchmarks/results.md]
                                [--png benchmarks/results.png] [--readme README.md]

The README's section (a few headline targets, their date, versions and
machine, and what was missed) lies between the two marker lines below;
everything else in the README is left as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap

ORDER = ["dispatch", "own_loop", "pipelines", "compute", "memory", "scaling", "allreduce",
         "dashboard", "sparse", "cached"]
README_START = "<!-- benchmarks: start (written by benchmarks/report.py) -->"
README_END = "<!-- benchmarks: end -->"
# The README's headline targets: (benchmark, the start of the target's `what`).
HEADLINES = [
    ("dispatch", "gaviz's default / the faster compute floor"),
    ("pipelines", "Keras at its best / gaviz, pipelines' geometric mean"),
    ("dispatch", "Keras at its best / gaviz's default, on a pipeline parsing CSV lines"),
    ("dispatch", "gaviz's default / Keras's default, the first epoch"),
    ("compute", "accumulation's extra time over the plain big batch"),
    ("memory", "accumulation's extra peak over plain batch 32"),
]


def load(directory: str, names=ORDER) -> list[dict]:
    """The results ``names`` in ``directory``, in the issue's order; all must be there."""
    names = [n for n in ORDER if n in names]
    missing = [n for n in names if not os.path.exists(os.path.join(directory, n + ".json"))]
    if missing:
        raise FileNotFoundError(
            f"No results for {', '.join(missing)} in {directory}: run `make bench` "
            "(or benchmarks/run.py) first."
        )
    results = []
    for name in names:
        with open(os.path.join(directory, name + ".json")) as handle:
            results.append(json.load(handle))
    return results


def cell(value, column: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if value >= 10000 else str(value)
    if "/" in column:
        return f"{value:.2f}x"
    if "loss" in column:
        return f"{value:.6f}"
    if "seconds" in column or "(s)" in column:
        return f"{value:.2f}"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def table(columns: list[str], rows: list[list]) -> list[str]:
    aligns = [":---" if i == 0 else "---:" for i in range(len(columns))]
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join(aligns) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(cell(v, c) for v, c in zip(row, columns)) + " |")
    return lines


def target_line(t: dict) -> str:
    sign = ">=" if t["at_least"] else "<="
    verdict = "met" if t["met"] else "**missed**"
    return (f"{t['what']}: {t['measured']:.2f}{t['unit']} (target {sign} "
            f"{t['limit']:g}{t['unit']}): {verdict}")


def environment_line(results: list[dict]) -> str:
    env = results[0]["environment"]
    dates = sorted({r["environment"]["date"] for r in results})
    gpus = f", {env['gpus']} GPU" if env["gpus"] else ", no GPU"
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return (f"Measured {when} by `make bench`: "
            f"TensorFlow {env['tensorflow']}, Keras {env['keras']}, Python {env['python']}, "
            f"{env['cpus']} CPU cores ({env['machine']}){gpus}.")


def benchmark_name(result: dict) -> str:
    return result["title"].split(":")[0]


def markdown(results: list[dict], heading: str = "##") -> str:
    """The tables: a summary of every target, then one section per benchmark."""
    lines = [environment_line(results), "", f"{heading} Targets", ""]
    lines += ["| benchmark | target | measured | met |", "| :--- | :--- | ---: | :---: |"]
    for result in results:
        for t in result.get("targets", []):
            sign = ">=" if t["at_least"] else "<="
            lines.append(
                f"| {benchmark_name(result)} | {t['what']} {sign} {t['limit']:g}"
                f"{t['unit']} | {t['measured']:.2f}{t['unit']} | "
                f"{'yes' if t['met'] else '**no**'} |"
            )
    for result in results:
        lines += ["", f"{heading} {result['title']}", "", result["setup"], ""]
        lines += table(result["columns"], result["rows"])
        extra = [target_line(t) for t in result.get("targets", [])] + result.get("notes", [])
        if extra:
            lines.append("")
            lines += [f"- {line}" for line in extra]
    return "\n".join(lines) + "\n"


def figure(results: list[dict], path: str):
    """results.png: one panel per measurement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name = {r["name"]: r["plot"] for r in results}
    fig = plt.figure(figsize=(32, 13))
    # The targets' text (spare) spans a row: its lines are long.
    axes = fig.subplot_mosaic([["dispatch", "own_loop", "pipelines", "memory", "dashboard",
                                "cached"],
                               ["compute", "time_k", "loss_k", "allreduce", "sparse", "cached"],
                               ["spare"] * 6], height_ratios=[1, 1, 0.9])
    (dispatch, pipelines, own_loop, compute, memory, dashboard, time_k, loss_k, allreduce,
     sparse, cached, spare) = (axes[name] for name in (
        "dispatch", "pipelines", "own_loop", "compute", "memory", "dashboard", "time_k", "loss_k",
        "allreduce", "sparse", "cached", "spare"))
    spare.axis("off")
    verdicts = [
        f"{'met' if t['met'] else 'MISSED'}: {r['title'].split(':')[0]}, "
        f"{t['measured']:.2f}{t['unit']} ({'>=' if t['at_least'] else '<='} "
        f"{t['limit']:g}{t['unit']})"
        for r in results for t in r.get("targets", [])
    ]
    half = -(-len(verdicts) // 2)  # two columns of targets
    for column, part in enumerate((verdicts[:half], verdicts[half:])):
        spare.text(0.5 * column, 1, ("Targets\n\n" if column == 0 else "\n\n") + "\n".join(
            textwrap.fill(v, 110, subsequent_indent="   ") for v in part),
            va="top", family="monospace", fontsize=9, transform=spare.transAxes)

    def bars(ax, labels, values, unit, title, highlight=(0,)):
        colors = ["tab:blue" if i in highlight else "tab:gray" for i in range(len(values))]
        ax.barh(range(len(values)), values, color=colors)
        ax.set_yticks(range(len(values)), labels)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_title(title)
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:.0f}" if v >= 10 else f" {v:.1f}", va="center", fontsize=8)
        ax.margins(x=0.2)

    p = by_name["dispatch"]
    bars(dispatch, p["labels"], p["ms"], "ms per epoch (log)", "1. Dispatch-bound MLP")
    dispatch.set_xscale("log")
    p = by_name["pipelines"]
    places = range(len(p["labels"]))
    for offset, series, color in ((-0.27, "gaviz_ms", "tab:blue"),
                                  (0, "keras_ms", "tab:orange"), (0.27, "read_ms", "tab:green")):
        pipelines.barh([i + offset for i in places], p[series], height=0.27, color=color)
    pipelines.set_yticks(places, p["labels"])
    pipelines.invert_yaxis()
    pipelines.set_xlabel("ms per epoch")
    pipelines.set_title("1c. Pipelines: gaviz (blue), Keras at its best\n(orange), reading alone (green)")
    p = by_name["own_loop"]
    bars(own_loop, p["labels"], p["ms"], "ms per epoch", "1b. Your own loop, Adam",
         highlight=[i for i, mine in enumerate(p["accumulator"]) if mine])
    p = by_name["compute"]
    bars(compute, p["labels"], p["ms"], "ms per epoch", "2. Compute-bound CNN")
    p = by_name["memory"]
    bars(memory, p["labels"], p["mib"], "peak growth (MiB)", "3. Peak memory in an epoch")
    # bench_memory.py lists plain batch 32, the reference, second.
    memory.axvline(p["mib"][1] + 1.5 * p["parameter_mib"], color="tab:red", ls="--", lw=1,
                   label="plain batch 32 + 1.5 x parameters")
    memory.legend(fontsize=8, loc="lower right")
    rows = next(r["rows"] for r in results if r["name"] == "dashboard")  # the medians
    bars(dashboard, ["first point", "all four runs"], [row[1] for row in rows],
         "seconds after Run", "")
    dashboard.set_title("5. Dashboard, k in {1, 2, 4, 8}", loc="right")  # the figure's edge

    p = by_name["scaling"]
    for series, label, style in (("fixed_effective", "fixed effective batch 256", "o-"),
                                 ("fixed_micro", "fixed micro-batch 32", "s--")):
        time_k.plot(p[series]["k"], p[series]["ms"], style, label=label)
        loss_k.plot(p[series]["k"], p[series]["loss"], style, label=label)
    for ax, ylabel, title in ((time_k, "ms per epoch", "4. Time per epoch against k"),
                              (loss_k, "final loss (MSE)", "4. Final loss against k")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(p["fixed_micro"]["k"], [str(k) for k in p["fixed_micro"]["k"]])
        ax.set_xlabel("accumulation_steps k")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    p = by_name["allreduce"]
    allreduce.plot(p["k"], p["per_update_ms"], "o-", label="one all-reduce per update (gaviz)")
    allreduce.plot(p["k"], p["per_micro_step_ms"], "s--", label="one all-reduce per micro-step")
    allreduce.set_xscale("log", base=2)
    allreduce.set_xticks(p["k"], [str(k) for k in p["k"]])
    allreduce.set_xlabel("accumulation_steps k")
    allreduce.set_ylabel("ms per epoch")
    allreduce.set_title("4. Two logical CPUs, MirroredStrategy")
    allreduce.legend(fontsize=8)
    allreduce.grid(True, alpha=0.3)

    p = by_name["sparse"]
    for (configuration, series), style in zip(p["mib"].items(), ("o-", "s--", "^:")):
        sparse.plot(p["k"], series, style, label=p["labels"][configuration].split(" (")[0])
    sparse.axhline(p["table_mib"], color="tab:gray", lw=1, label="the table's bytes")
    sparse.set_ylim(bottom=0)
    sparse.set_xscale("log", base=2)
    sparse.set_xticks(p["k"], [str(k) for k in p["k"]])
    sparse.set_xlabel("accumulation_steps k")
    sparse.set_ylabel("peak growth (MiB)")
    sparse.set_title("6. An Embedding's window", loc="right")  # the figure's edge
    sparse.legend(fontsize=7, loc="lower right")
    sparse.grid(True, alpha=0.3)

    p = by_name["cached"]
    labels = [label.replace("gaviz, ", "").replace(", ", "\n", 1) for label in p["labels"]]
    bars(cached, labels, p["ms"], "ms per epoch", "", highlight=(1, 2))
    cached.set_title("7. The cached window", loc="right")  # the figure's edge

    fig.suptitle("gaviz benchmarks: " + environment_line(results), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def update_readme(path: str, section: str):
    with open(path) as handle:
        text = handle.read()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{path} has no benchmark markers ({README_START!r} ... {README_END!r})")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    with open(path, "w") as handle:
        handle.write(head + README_START + "\n" + section + README_END + tail)


def headline(result: dict, what: str) -> dict:
    found = [t for t in result.get("targets", []) if t["what"].startswith(what)]
    if len(found) != 1:
        raise KeyError(f"{result['name']} has {len(found)} targets starting {what!r}: "
                       "update report.HEADLINES")
    return found[0]


def readme_section(results: list[dict]) -> str:
    """A few headline targets, the run's date and machine, and every missed target."""
    by_name = {r["name"]: r for r in results}
    lines = [environment_line(results), "",
             "| benchmark | what | measured | target |", "| :--- | :--- | ---: | ---: |"]
    for name, what in HEADLINES:
        t = headline(by_name[name], what)
        sign = ">=" if t["at_least"] else "<="
        lines.append(f"| {benchmark_name(by_name[name])} | {t['what']} | "
                     f"{t['measured']:.2f}{t['unit']} | {sign} {t['limit']:g}{t['unit']} |")
    targets = [t for r in results for t in r.get("targets", [])]
    shown = [headline(by_name[name], what) for name, what in HEADLINES]
    missed = [t for t in targets if not t["met"]]
    unshown = [t["what"] for t in missed if t not in shown]
    lines += ["", f"{len(targets) - len(missed)} of {len(targets)} targets met"
              + (f"; also missed: {'; '.join(unshown)}." if unshown else ".")
              + " Every table, method and plot: [benchmarks/results.md](benchmarks/results.md)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="benchmarks/results")
    parser.add_argument("--md", default="benchmarks/results.md")
    parser.add_argument("--png", default="benchmarks/results.png")
    parser.add_argument("--readme", default="README.md", help="'' to leave the README alone")
    parser.add_argument("--names", nargs="*", default=ORDER, choices=ORDER,
                        help="the results to report (all of them for the README)")
    args = parser.parse_args(argv)
    results = load(args.results, args.names if not args.readme else ORDER)
    with open(args.md, "w") as handle:
        handle.write("# gaviz benchmarks\n\nWritten by `make bench` (benchmarks/report.py); "
                     "plots in results.png, raw figures in results/*.json.\n\n")
        handle.write(markdown(results))
    complete = len(results) == len(ORDER)  # the figure has a panel for each
    if complete:
        figure(results, args.png)
    if args.readme:
        update_readme(args.readme, readme_section(results))
    print(f"wrote {args.md}" + (f" and {args.png}" if complete else "")
          + (f", updated {args.readme}" if args.readme else ""))


if __name__ == "__main__":
    main()
