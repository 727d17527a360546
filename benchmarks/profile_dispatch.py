"""Where an epoch of the dispatch benchmark goes, from TensorFlow's profiler.

    python benchmarks/profile_dispatch.py [--epochs 3] [--logdir /tmp/gaviz-profile]

Not part of ``make bench``: it explains one of its rows (README, "Dispatch-bound").
It trains bench_dispatch.py's MLP the way that benchmark does (gaviz on arrays,
``fit(x, y, batch_size=32)``, k = 8), once untimed, then ``--epochs`` epochs
under ``tf.profiler.experimental``; then the same for the floor (the same
forward and backward passes over the micro-batches in one graph, no updates), and for the
floor run one micro-step at a time, as gaviz runs them to keep one
micro-batch's activations alive (``parallel_iterations=1``); then gaviz
given a shuffled ``tf.data`` pipeline, which it iterates, as it reads it
(tf.data's autotuner off) and with the autotuner kept, and that floor fed by
the pipeline as gaviz reads it (the pipeline's own threads are not
TensorFlow's executor: their work shows as "no op running" where the loop
waits for it). It reads the
``*.xplane.pb`` the profiler writes (TensorFlow's own protobuf, no plugin
needed) and splits the epoch's wall time into categories:

- each op the profiler records is put in a category by its name: the trainer
  names its phases with ``tf.name_scope`` (``gather``, ``loss``,
  ``add_to_sums``, ``all_reduce``, ``finish``, ``update``, ``report``,
  ``close``), the model's ops carry the model's name, its gradient ops
  ``gradient_tape``;
- wall time is split along a sweep line: an instant when n ops run (on the
  two executor threads) counts 1/n to each op's category; an instant when an
  executor thread is busy outside any recorded op counts to "executor: loop
  control, cheap ops, scheduling" (the profiler does not record ops TensorFlow
  deems cheap: loop control, scalar arithmetic, most small adds); an instant
  when no executor thread is busy counts to "no op running": Python, the call
  into the graph, threads handing work to each other.

The profiler itself slows ops down (by 10-40% on a small model), so shares,
not milliseconds, are what this measures; the timings printed before each
profile are without it. Other processes on the machine shift shares too:
run it twice.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import shutil
import sys
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_dispatch  # noqa: E402  (imports harness, which quiets TensorFlow)
import bench_pipelines  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from gaviz.training.data.feeds import without_autotuning  # noqa: E402

#: Categories, in the order they are printed; the first matching rule wins.
PHASES = ("gather", "get_next", "add_to_sums", "loss", "all_reduce", "finish", "update",
          "report", "close")
EXECUTOR = "executor: loop control, cheap ops, scheduling"
IDLE = "no op running: Python, the call, hand-offs"
OTHER = "other recorded ops (loop tests, ...)"
#: bench_dispatch's models are keras.Sequential: their ops' scopes start so.
MODEL_NAME = "sequential"


def op_category(op_name: str, model_name: str) -> str:
    """The category of a recorded op, from its full name ``scope/.../name``."""
    parts = op_name.split("/")
    for phase in PHASES:
        if phase in parts:
            return phase
    if any(p.startswith(model_name) for p in parts):
        return "model backward" if "gradient_tape" in parts else "model forward"
    return OTHER


def read_space(logdir: str):
    (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    space = xplane_pb2.XSpace()
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    return host


def intervals(host, model_name):
    """``(ops, busy, span, calls)``: recorded ops ``(start, end, category)`` and
    executor activity ``(start, end)`` on the executor threads, in picoseconds;
    ``span`` is the profile's first and last instant; ``calls`` the graph
    functions Python called."""
    ops, busy, starts, ends = [], [], [], []
    calls = 0
    for line in host.lines:
        base = line.timestamp_ns * 1000
        for event in line.events:
            start = base + event.offset_ps
            end = start + event.duration_ps
            starts.append(start)
            ends.append(end)
            name = host.event_metadata[event.metadata_id].name
            if name.startswith("EagerLocalExecute: __inference_"):
                calls += 1
            if not line.name.startswith("tf_Compute"):
                continue
            if name == "ExecutorState::Process":
                busy.append((start, end))
            elif ":" in name and "::" not in name:  # "scope/op_name:OpType"
                ops.append((start, end, op_category(name.rsplit(":", 1)[0], model_name)))
    return ops, busy, (min(starts), max(ends)), calls


def wall_shares(ops, busy, span) -> dict[str, float]:
    """Picoseconds of wall time per category, along a sweep line (see the docstring)."""
    events = []
    for start, end, category in ops:
        events += [(start, 1, category), (end, -1, category)]
    for start, end in busy:
        events += [(start, 1, None), (end, -1, None)]
    events.sort(key=lambda e: (e[0], e[1]))
    shares = collections.defaultdict(float)
    running = collections.Counter()
    executors = 0
    last = span[0]
    for time_ps, change, category in events:
        elapsed = time_ps - last
        if elapsed > 0:
            total = sum(running.values())
            if total:
                for name, count in running.items():
                    shares[name] += elapsed * count / total
            else:
                shares[EXECUTOR if executors else IDLE] += elapsed
        last = time_ps
        if category is None:
            executors += change
        else:
            running[category] += change
            if not running[category]:
                del running[category]
    shares[IDLE] += span[1] - last
    return dict(shares)


def profile(train, epochs: int, logdir: str, model_name: str) -> dict[str, float]:
    """Milliseconds per epoch per category of ``train(epochs)``, profiled, and
    graph calls per epoch."""
    shutil.rmtree(logdir, ignore_errors=True)
    tf.profiler.experimental.start(logdir)
    try:
        train(epochs)
    finally:
        tf.profiler.experimental.stop()
    ops, busy, span, calls = intervals(read_space(logdir), model_name)
    shares = {name: ps / 1e9 / epochs for name, ps in wall_shares(ops, busy, span).items()}
    return shares, calls / epochs


def _shuffled(x, y):
    return bench_pipelines.shuffled(x, y, None)


_AUTOTUNED = tf.data.Options()
_AUTOTUNED.autotune.enabled = True


#: What is profiled: title -> a function (x, y) -> train(epochs), as bench_dispatch's.
CONTESTANTS = {
    "gaviz, arrays (bench_dispatch's configuration)": bench_dispatch.gaviz_epoch,
    "floor (its loop may overlap micro-steps)": bench_dispatch.floor_epoch,
    "floor, one micro-step at a time": partial(bench_dispatch.floor_epoch, one_at_a_time=True),
    "gaviz, a shuffled pipeline (iterated; bench_pipelines.py's)": lambda x, y: (
        bench_dispatch.gaviz_dataset_epoch(x, y, pipeline=_shuffled)),
    "gaviz, the same pipeline with autotune.enabled=True (tf.data's autotuner kept)": (
        lambda x, y: bench_dispatch.gaviz_dataset_epoch(
            x, y, pipeline=lambda x, y: _shuffled(x, y).with_options(_AUTOTUNED))),
    "floor, one micro-step at a time, fed by the shuffled pipeline as gaviz reads it": (
        lambda x, y: bench_dispatch.floor_epoch(
            x, y, one_at_a_time=True, dataset=without_autotuning(_shuffled(x, y)))),
}
#: Categories summed into the summary line, by what they are.
GROUPS = {
    "arithmetic (model forward, backward, loss)": ("model forward", "model backward", "loss"),
    "cutting micro-batches (gather)": ("gather", "get_next"),
    "adding into the sums": ("add_to_sums",),
    "once per window (all_reduce, finish, update, report, close)": (
        "all_reduce", "finish", "update", "report", "close"),
    "control flow, cheap ops, scheduling": (EXECUTOR, OTHER),
    "outside any op (Python, the call, hand-offs)": (IDLE,),
}


def unprofiled_ms(train, epochs: int) -> float:
    start = time.perf_counter()
    train(epochs)
    return (time.perf_counter() - start) * 1000 / epochs


def print_table(title: str, unprofiled: float, shares: dict[str, float], micro_batches: int):
    total = sum(shares.values())
    print(f"\n{title}: {unprofiled:.0f} ms per epoch unprofiled, {total:.0f} ms profiled")
    for group, members in GROUPS.items():
        ms = sum(shares.get(m, 0.0) for m in members)
        print(f"  {group:62} {ms / total:6.1%}")
    print(f"{'category':48} {'ms/epoch':>9} {'share':>6} {'µs/micro-batch':>15}")
    for name, ms in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"{name:48} {ms:9.1f} {ms / total:6.1%} {ms * 1000 / micro_batches:15.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--logdir", default="/tmp/gaviz-profile")
    args = parser.parse_args(argv)
    x, y = bench_dispatch.data(args.samples)
    micro_batches = args.samples // bench_dispatch.MICRO
    for number, (title, make) in enumerate(CONTESTANTS.items()):
        train = make(x, y)
        train(1)  # tracing, first allocations
        unprofiled = unprofiled_ms(train, args.epochs)
        shares, calls = profile(train, args.epochs, os.path.join(args.logdir, str(number)),
                                MODEL_NAME)
        print_table(title, unprofiled, shares, micro_batches)
        print(f"  graph calls per epoch: {calls:g}")


if __name__ == "__main__":
    main()
