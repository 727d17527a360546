"""Runs every benchmark, each in its own process, then writes the report.

    python benchmarks/run.py            # what `make bench` runs (~55 minutes on 2 cores)
    python benchmarks/run.py --gpu      # on a machine with a GPU (Colab): benchmarks/gpu/
    python benchmarks/run.py --quick --results /tmp/r --md /tmp/r/results.md \
        --png /tmp/r/results.png --readme ''   # what the tests run

A fresh process per benchmark keeps them from sharing caches, thread pools
or allocator state (bench_allreduce.py also needs two logical devices set up
before TensorFlow starts; bench_memory.py starts one process per
configuration of its own).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import report

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks, not figures")
    parser.add_argument("--results", default="benchmarks/results")
    parser.add_argument("--md", default="benchmarks/results.md")
    parser.add_argument("--png", default="benchmarks/results.png")
    parser.add_argument("--readme", default="README.md", help="'' to leave the README alone")
    parser.add_argument("--only", nargs="*", default=report.ORDER, choices=report.ORDER,
                        help="run only these (the report still needs all results)")
    parser.add_argument("--gpu", action="store_true",
                        help="on a GPU: the benchmarks that time training ("
                             + ", ".join(GPU_ORDER) + ") into benchmarks/gpu/, README untouched")
    args = parser.parse_args(argv)
    names = args.only
    if args.gpu:
        require_gpu()
        names = GPU_ORDER
        gpu = os.path.join(HERE, "gpu")
        args.results, args.readme = os.path.join(gpu, "results"), ""
        args.md, args.png = os.path.join(gpu, "results.md"), os.path.join(gpu, "results.png")

    for name in names:
        command = [sys.executable, os.path.join(HERE, f"bench_{name}.py"),
                   "--json", os.path.join(args.results, name + ".json")]
        if args.quick:
            command.append("--quick")
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        subprocess.run(command, check=True)
        print(f"   ({time.perf_counter() - start:.0f} s)", flush=True)
    report.main(["--results", args.results, "--md", args.md, "--png", args.png,
                 "--readme", args.readme, "--names", *names])


#: What a GPU run times: training's speed and exactness (the memory
#: benchmark reads the CPU allocator, the others need several devices or a browser).
GPU_ORDER = ["dispatch", "own_loop", "compute"]


def require_gpu():
    """Exits with what to do when TensorFlow sees no GPU."""
    found = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; "
         "print(len(tf.config.list_physical_devices('GPU')))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]
    if found == "0":
        sys.exit("--gpu: TensorFlow sees no GPU on this machine. On Colab: Runtime > Change "
                 "runtime type > a GPU, then run this again; elsewhere, install a TensorFlow "
                 "built for your GPU (pip install 'tensorflow[and-cuda]').")


if __name__ == "__main__":
    main()
