"""gaviz: learn and use exact gradient accumulation in TensorFlow 2 / Keras 3.

Public API:
    AccumulationTrainer: the exact trainer (the window's loop in the graph).
    NonFiniteUpdate: raised when a window's loss or gradient is not finite.
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

The widgets (ipywidgets) and plotting (matplotlib) are imported when first
used, so ``import gaviz`` costs only TensorFlow and Keras.
"""

import importlib

from gaviz import _tensorflow  # noqa: F401  first: checks TensorFlow, loads it quietly
from gaviz import demo, pitfalls, rules
from gaviz.batchnorm import batch_dependence
from gaviz.compare import compare_steps
from gaviz.diagnosis import Diagnosis, SubjectError, diagnose
from gaviz.history import History, NonFiniteUpdate, Update
from gaviz.measure import Comparison, compare_with_exact
from gaviz.memory import MemoryReport, measure_peak_memory
from gaviz.pitfalls import PITFALLS
from gaviz.rules import Rule
from gaviz.runs import RunPlan, RunResult
from gaviz.trainer import AccumulationTrainer

#: Public names whose modules import ipywidgets or matplotlib: loaded on first use.
_LAZY = {
    "dashboard": "gaviz.widgets",
    "Dashboard": "gaviz.widgets",
    "LivePlot": "gaviz.widgets",
    "plot_histories": "gaviz.plotting",
}

#: ``gaviz.Run``, the old name of a comparison's run.
Run = RunResult


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gaviz' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "PITFALLS",
    "AccumulationTrainer",
    "Comparison",
    "compare_with_exact",
    "diagnose",
    "Diagnosis",
    "SubjectError",
    "MemoryReport",
    "measure_peak_memory",
    "NonFiniteUpdate",
    "pitfalls",
    "History",
    "Rule",
    "rules",
    "Run",
    "RunPlan",
    "RunResult",
    "batch_dependence",
    "Update",
    "compare_steps",
    "dashboard",
    "Dashboard",
    "LivePlot",
    "demo",
    "plot_histories",
]
from gaviz._version import __version__  # noqa: E402  from the package metadata
