"""gaviz's command line (``gaviz``, or ``python -m gaviz``).

    gaviz lessons DIR [--force]                     copy the course into DIR; then jupyter lab DIR
    gaviz compare --steps 1 2 4 8 --out curves.png  train the demo at several step counts, plot

The command line starts TensorFlow quietly (gaviz/quiet.py): on success its
stderr is empty.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from gaviz import __version__
from gaviz.lesson_files import copy_lessons


def _parser():
    parser = argparse.ArgumentParser(prog="gaviz", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gaviz {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    lessons = commands.add_parser(
        "lessons", help="copy the lessons and their solutions into a folder, for `jupyter lab`")
    lessons.add_argument("directory", help="folder to copy the course into (made if missing)")
    lessons.add_argument("--force", action="store_true",
                         help="overwrite lesson files already in the folder")
    compare = commands.add_parser(
        "compare",
        help="train the demo model at several accumulation step counts and plot the curves",
    )
    compare.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4, 8],
                         help="accumulation step counts to compare (default: 1 2 4 8)")
    compare.add_argument("--out", default="curves.png", help="figure to write (PNG)")
    compare.add_argument("--epochs", type=int, default=5)
    compare.add_argument("--effective-batch-size", type=int, default=256,
                         help="effective batch held fixed in the left panel")
    compare.add_argument("--micro-batch-size", type=int, default=32,
                         help="micro-batch held fixed in the right panel")
    compare.add_argument("--learning-rate", type=float, default=0.01)
    compare.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="adam")
    compare.add_argument("--samples", type=int, default=4096, help="demo data set size")
    compare.add_argument("--seed", type=int, default=0)
    return parser


def lessons_command(args) -> str:
    written = copy_lessons(args.directory, force=args.force)
    notebooks = sum(path.suffix == ".ipynb" for path in written)
    solutions = sum(path.parent.name == "solutions" for path in written)
    return (f"copied {notebooks} lessons and {solutions} solutions into {args.directory}\n"
            f"open them with: jupyter lab {shlex.quote(str(args.directory))}")


def compare_command(args) -> str:
    import gaviz.quiet  # noqa: F401  before matplotlib and Keras: TensorFlow without its log

    # isort: split
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gaviz.plotting import plot_histories
    from gaviz.widgets.compare import compare_steps, format_table

    common = dict(
        steps=args.steps, effective_batch_size=args.effective_batch_size,
        micro_batch_size=args.micro_batch_size, epochs=args.epochs,
        learning_rate=args.learning_rate, optimizer=args.optimizer,
        samples=args.samples, seed=args.seed,
    )
    panels = [
        (f"same effective batch ({args.effective_batch_size}): exact, so the curves coincide",
         compare_steps(hold="effective", **common)),
        (f"same micro-batch ({args.micro_batch_size})", compare_steps(hold="micro", **common)),
    ]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, (title, runs) in zip(axes, panels):
        plot_histories([r.history for r in runs], [r.label for r in runs], ax=ax,
                       x_axis="samples", title=title)
    figure.suptitle(f"gaviz demo: {args.optimizer}, lr {args.learning_rate}, {args.epochs} epochs")
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    plt.close(figure)
    tables = "\n\n".join(format_table(runs, title) for title, runs in panels)
    return f"{tables}\n\nwrote {args.out}"


COMMANDS = {"lessons": lessons_command, "compare": compare_command}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's later C++ log: errors only
    try:
        print(COMMANDS[args.command](args))
    except (ValueError, TypeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
