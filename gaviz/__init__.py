"""gaviz: learn and use exact gradient accumulation in TensorFlow 2 / Keras 3.

Public API:
    AccumulationTrainer: the exact trainer (the window's loop in the graph).
    Accumulator, FlushAtEpochEnd: the same exact window for your own loop or
        train_step, and the Keras callback that flushes it at an epoch's end.
    SparseGradientWarning: a sparse gradient summed into a dense window after
        all, where Model.fit hands its rows to the optimizer one by one.
    CoupledLoss: a compiled loss whose value for a row depends on the other
        rows of its batch, refused with ``cached_window=False``.
    CachedWindowUsed, cached_gradients: said where the trainer makes its
        windows with the cached window (a loss that couples rows), and the same
        window's gradient for your own loop.
    InexactAddedLoss: a loss added with add_loss that no window of
        micro-batches can reproduce exactly, said at run time.
    NonFiniteUpdate: raised when a window's loss or gradient is not finite.
    Verification, NotExact, verify_loop: what ``trainer.verify`` found (gaviz
        against Model.fit on your model), what ``fit(verify=True)`` raises
        where they differ, and the same check of your own accumulation loop.
    History, Update: what a run reports, one record per optimizer update.
    Rule, rules: the window's arithmetic as data (for your own variations).
    compare_steps, RunPlan, RunResult: train the demo problem at several
        accumulation steps.
    PITFALLS, pitfalls: the gallery of deliberately broken trainers.
    compare_with_exact, Comparison: how far a trainer lands from the exact one.
    diagnose, Diagnosis: measure anyone's accumulation loop and name its defects.
    batch_dependence: accumulation against the big batch with a normalization layer.
    measure_peak_memory, MemoryReport: peak memory of a run, on GPU or CPU.
    dashboard, Dashboard, LivePlot: live widgets for notebooks.
    plot_histories: effective-batch loss curves from histories.
    demo: the built-in synthetic data set and model.
    copy_lessons: copy the course's notebooks and solutions into a folder.

``import gaviz`` loads nothing heavy and touches no file descriptor: it checks
that a TensorFlow is installed, and each public name is imported when first
used (PEP 562), TensorFlow with it, as ``import tensorflow`` would (its
start-up log included; ``import gaviz.quiet`` first keeps that log off
stderr: see gaviz/quiet.py).
"""

import importlib

from gaviz import _tensorflow
from gaviz._version import __version__ as __version__  # from the package metadata

_tensorflow.check_installed()

#: Each public name and where it lives: a subpackage that re-exports it, or, for
#: the public modules ``demo``, ``pitfalls`` and ``rules``, the module itself ("").
_PUBLIC = {
    "AccumulationTrainer": "gaviz.training",
    "Accumulator": "gaviz.training",
    "CachedWindowUsed": "gaviz.training",
    "cached_gradients": "gaviz.training",
    "CoupledLoss": "gaviz.training",
    "FlushAtEpochEnd": "gaviz.training",
    "History": "gaviz.training",
    "InexactAddedLoss": "gaviz.training",
    "NonFiniteUpdate": "gaviz.training",
    "NotExact": "gaviz.training",
    "Rule": "gaviz.training",
    "SparseGradientWarning": "gaviz.training",
    "Update": "gaviz.training",
    "Verification": "gaviz.training",
    "verify_loop": "gaviz.training",
    "batch_dependence": "gaviz.gallery",
    "Comparison": "gaviz.gallery",
    "compare_with_exact": "gaviz.gallery",
    "Diagnosis": "gaviz.gallery",
    "diagnose": "gaviz.gallery",
    "MemoryReport": "gaviz.gallery",
    "measure_peak_memory": "gaviz.gallery",
    "PITFALLS": "gaviz.gallery",
    "SubjectError": "gaviz.gallery",
    "compare_steps": "gaviz.widgets",
    "dashboard": "gaviz.widgets",
    "Dashboard": "gaviz.widgets",
    "LivePlot": "gaviz.widgets",
    "RunPlan": "gaviz.widgets",
    "RunResult": "gaviz.widgets",
    "plot_histories": "gaviz.plotting",
    "copy_lessons": "gaviz.lesson_files",
    "demo": "",
    "pitfalls": "",
    "rules": "",
}
#: Where the public modules live.
_MODULES = {"demo": "gaviz.demo", "pitfalls": "gaviz.gallery.pitfalls",
            "rules": "gaviz.training.window.rules"}
#: Public names that need no TensorFlow.
_WITHOUT_TENSORFLOW = {"copy_lessons"}


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'gaviz' has no attribute {name!r}")
    if name not in _WITHOUT_TENSORFLOW:
        _tensorflow.import_tensorflow()  # checks the version first, with a helpful message
    module = importlib.import_module(_PUBLIC[name] or _MODULES[name])
    value = module if not _PUBLIC[name] else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = sorted(_PUBLIC, key=str.lower)
