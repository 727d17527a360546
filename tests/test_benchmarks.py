"""The benchmark suite: its timing method, its report, and one quick run of all of it.

The figures themselves are measured by ``make bench``, not asserted here;
what is asserted is that the method is the one the README describes, that
the committed report matches the committed results, and that every
benchmark still runs (with the exactness checks the benchmarks carry).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import harness  # noqa: E402
import report  # noqa: E402


def test_alternate_warms_up_then_rotates_the_order():
    calls = []
    contestants = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = harness.alternate(contestants, rounds=3, warmup=1)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")
    assert {name: len(t) for name, t in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for run_times in times.values() for t in run_times)


def test_alternate_rejects_zero_rounds():
    with pytest.raises(ValueError, match="rounds"):
        harness.alternate({"a": lambda: None}, rounds=0)


def test_target_compares_in_the_stated_direction():
    assert harness.target("speed-up", 4.2, 4.0, "x", at_least=True)["met"]
    assert not harness.target("speed-up", 3.9, 4.0, "x", at_least=True)["met"]
    assert harness.target("overhead", 9.0, 10.0, "%", at_least=False)["met"]
    assert not harness.target("overhead", 11.0, 10.0, "%", at_least=False)["met"]


def fake_results(directory: Path):
    """One result per benchmark, as the scripts write them, with made-up figures."""
    env = {"date": "2026-01-02", "tensorflow": "2.x", "keras": "3.x", "python": "3.11", "cpus": 2,
           "machine": "x86_64", "gpus": 0}
    plots = {
        "dispatch": {"labels": ["gaviz", "Keras built-in"], "ms": [50.0, 180.0]},
        "pipelines": {"labels": ["shuffle", "TFRecord files"], "gaviz_ms": [60.0, 110.0],
                      "keras_ms": [90.0, 120.0], "read_ms": [20.0, 70.0]},
        "own_loop": {"labels": ["Accumulator, a", "Keras option, a"], "ms": [40.0, 42.0],
                     "accumulator": [True, False]},
        "compute": {"labels": ["gaviz 32 x 8", "gaviz 256 x 1"], "ms": [1200.0, 1250.0]},
        "memory": {"labels": ["gaviz 32 x 8", "plain 32", "plain 256"],
                   "mib": [20.0, 18.0, 150.0], "parameter_mib": 4.0},
        "scaling": {series: {"k": [1, 2, 4], "ms": [40.0, 45.0, 50.0], "loss": [1.0, 1.0, 1.0]}
                    for series in ("fixed_effective", "fixed_micro")},
        "allreduce": {"k": [1, 2, 4], "per_update_ms": [50.0, 45.0, 40.0],
                      "per_micro_step_ms": [50.0, 55.0, 60.0]},
        "dashboard": {"first": [0.5, 0.7, 0.6], "total": [2.0, 2.5, 2.2]},
        "sparse": {"k": [2, 8, 32], "table_mib": 29.3,
                   "mib": {c: [10.0, 30.0, 70.0] for c in ("occurrences", "dense", "keras")},
                   "labels": {c: c for c in ("occurrences", "dense", "keras")}},
        "cached": {"labels": ["gaviz, summing", "gaviz, cached", "Model.fit"],
                   "ms": [10.0, 12.0, 40.0], "mib_labels": ["a", "b"], "mib": [20.0, 25.0]},
    }
    for name in report.ORDER:
        result = {
            "name": name, "title": f"{name.title()}: test", "setup": f"setup of {name}",
            "columns": ["trainer", "median epoch (ms)", "time / gaviz"],
            "rows": [["gaviz", 50.0, 1.0], ["other", 180.0, 3.6]],
            "environment": env, "plot": plots[name],
            "targets": [harness.target(what, 3.6, 4.0, "x", at_least=True)
                        for what in [w for n, w in report.HEADLINES if n == name] or [f"{name} ratio"]],
            "notes": [f"a note on {name}"],
        }
        (directory / f"{name}.json").write_text(json.dumps(result))


def test_report_writes_tables_plots_and_only_the_readme_section(tmp_path):
    fake_results(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n\n{report.README_START}\nold\n{report.README_END}\n"
                      "\nafter\n")
    report.main(["--results", str(tmp_path), "--md", str(tmp_path / "results.md"),
                 "--png", str(tmp_path / "results.png"), "--readme", str(readme)])
    md = (tmp_path / "results.md").read_text()
    for name in report.ORDER:
        assert f"## {name.title()}: test" in md and f"a note on {name}" in md
    assert "| gaviz | 50.0 | 1.00x |" in md
    assert "3.60x (target >= 4x): **missed**" in md
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\nafter\n")
    assert "old" not in text
    section = text.split(report.README_START)[1].split(report.README_END)[0]
    assert "Measured 2026-01-02 by `make bench`: TensorFlow 2.x, Keras 3.x" in section
    for _, what in report.HEADLINES:
        assert f"| {what} | 3.60x | >= 4x |" in section
    headlined = {name for name, _ in report.HEADLINES}
    # One target each for the benchmarks without a headline.
    targets = len(report.HEADLINES) + len([n for n in report.ORDER if n not in headlined])
    assert f"0 of {targets} targets met; also missed: " in section
    assert "[benchmarks/results.md](benchmarks/results.md)" in section


def test_report_names_missing_results(tmp_path):
    fake_results(tmp_path)
    (tmp_path / "memory.json").unlink()
    with pytest.raises(FileNotFoundError, match="memory"):
        report.load(str(tmp_path))


def test_committed_report_and_readme_match_the_committed_results():
    results = report.load(str(BENCHMARKS / "results"))
    assert report.markdown(results) in (BENCHMARKS / "results.md").read_text()
    readme = (ROOT / "README.md").read_text()
    section = readme.split(report.README_START, 1)[1].split(report.README_END, 1)[0]
    assert section.strip() == report.readme_section(results).strip()
    assert (BENCHMARKS / "results.png").stat().st_size > 10_000
    assert not any(r["quick"] for r in results), "the committed results are from --quick"


def test_the_committed_pipelines_figure_plots_the_columns_its_title_names():
    (result,) = [r for r in report.load(str(BENCHMARKS / "results")) if r["name"] == "pipelines"]
    assert_pipelines_plot_matches_its_table(result)


def assert_pipelines_plot_matches_its_table(result):
    """The figure's bars are the table's columns: gaviz (blue), Keras at its
    best (orange), reading alone (green), pipeline by pipeline."""
    column = {name: [row[i] for row in result["rows"]]
              for i, name in enumerate(result["columns"])}
    plot = result["plot"]
    assert plot["gaviz_ms"] == column["gaviz (ms)"]
    assert plot["keras_ms"] == column["Keras at its best (ms)"]
    assert plot["read_ms"] == column["reading alone (ms)"]
    assert len(plot["labels"]) == len(result["rows"])


def memory_growth(configuration: str) -> dict:
    """One configuration of bench_memory.py (--quick, dense layers of 512), in a fresh process.

    With dense layers of 512 the weights are 1.3 MiB, and a micro-batch of 32
    images holds about 25 MiB of activations (mostly the convolutions'), so
    the cost this test looks for (a second micro-batch's activations) is far
    larger than the allocator's run-to-run noise, which reaches 8 MiB (a
    freed block reused for a smaller tensor is counted whole).
    """
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_memory.py"), "--quick", "--child", configuration,
         "--width", "512"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def plain_steps():
    """The plain step's peak growth at batch 32 and at batch 32 x k (bytes)."""
    bench_memory = pytest.importorskip("bench_memory")
    small = memory_growth(bench_memory.PLAIN_SMALL)
    big = memory_growth(bench_memory.PLAIN_BIG)
    activations = (big["growth_bytes"] - small["growth_bytes"]) / (bench_memory.K - 1)
    # The measurement sees activations grow with the batch: a micro-batch's
    # are many times the weights.
    assert activations > 10 * small["parameter_bytes"], (small, big)
    return small["growth_bytes"], activations


@pytest.mark.parametrize(
    "source",
    # Not GAVIZ_XLA: on a CPU this CNN's micro-steps are compiled one by one
    # (XLA's convolution gradients are slow in a loop), and there even
    # overlapping micro-steps (parallel_iterations=10) peak the same,
    # 77 MiB against 73-81, so the case could not fail.
    ["GAVIZ", "GAVIZ_ARRAYS"],
)
def test_accumulation_holds_one_micro_batch_of_activations_at_a_time(source, plain_steps):
    """Held to the plain step at the micro-batch, run the same way.

    Accumulation may add the window's sums (one copy of the weights) and
    noise, never a second micro-batch's activations: with micro-steps
    overlapping in the loop (parallel_iterations=10) the extra peak measured
    33 to 63 MiB against this test's limit of 14 MiB; in order, 1 to 9 MiB.
    """
    bench_memory = pytest.importorskip("bench_memory")
    plain, activations = plain_steps
    accumulated = memory_growth(getattr(bench_memory, source))
    extra = accumulated["growth_bytes"] - plain
    limit = accumulated["parameter_bytes"] + activations / 2
    assert extra <= limit, (accumulated, plain, activations)


def test_every_benchmark_runs_and_reports(tmp_path):
    """``make bench`` in miniature: every script (--quick), then the report."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--quick", "--results", str(tmp_path),
         "--md", str(tmp_path / "results.md"), "--png", str(tmp_path / "results.png"),
         "--readme", ""],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = {r["name"]: r for r in report.load(str(tmp_path))}
    assert all(r["quick"] for r in results.values())
    md = (tmp_path / "results.md").read_text()
    assert all(r["title"] in md for r in results.values())
    # Exactness carried by the benchmarks: at a fixed effective batch every k
    # trains to the same loss (bench_allreduce.py fails by itself if its two
    # trainers disagree).
    assert results["scaling"]["plot"]["fixed_effective"]["relative_loss_spread"] < 1e-4
    for name in ("dispatch", "compute"):
        assert all(row[1] > 0 for row in results[name]["rows"])
    assert_own_loops_end_where_they_should(results["own_loop"])
    assert_pipelines_plot_matches_its_table(results["pipelines"])


def assert_own_loops_end_where_they_should(result):
    """bench_own_loop.py's check, as recorded: the Accumulator's loops on the big
    batch's weights, Keras's option on the mean of micro-batch means, in every
    loop shape, on an epoch whose last micro-batch is ragged."""
    exactness = result["exactness"]
    assert exactness["micro_batch_sizes"][-1] < exactness["micro_batch_sizes"][0]
    loops = exactness["loops"]
    assert len(loops) == 6  # three loop shapes, each with both
    for label, gaps in loops.items():
        expected = "big batch" if label.startswith("gaviz.Accumulator") else "mean of means"
        other = {"big batch": "mean of means", "mean of means": "big batch"}[expected]
        assert gaps["expected"] == expected, label
        assert gaps[f"to the {expected}"] <= 1e-5, (label, gaps)
        assert gaps[f"to the {other}"] > 1e-3, (label, gaps)
    assert all(row[1] > 0 and row[2] > 0 for row in result["rows"])



def test_the_gpu_run_says_what_to_do_where_tensorflow_sees_no_gpu():
    """`benchmarks/run.py --gpu` is one command on a GPU; without one it stops, saying so."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("a GPU is here: the run would time it")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "run.py"), "--gpu"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0
    assert "--gpu: TensorFlow sees no GPU" in done.stderr and "Colab" in done.stderr
    assert not (BENCHMARKS / "gpu").exists()
