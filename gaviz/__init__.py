"""gaviz: learn and use exact gradient accumulation in TensorFlow 2 / Keras 3.

Public API:
    AccumulationTrainer: the exact trainer (one graph call per update).
    History, Update: what a run reports, one record per optimizer update.
    compare_steps, Run: train the demo problem at several accumulation steps.
    PITFALLS, pitfalls: the gallery of deliberately broken trainers.
    compare_with_exact, Comparison: how far a trainer lands from the exact one.
    batch_dependence: accumulation against the big batch with a normalization layer.
    measure_peak_memory, MemoryReport: peak memory of a run, on GPU or CPU.
    dashboard, Dashboard, LivePlot: live widgets for notebooks.
    plot_histories: effective-batch loss curves from histories.
    demo: the built-in synthetic data set and model.
"""

from gaviz import _tensorflow  # noqa: F401  first: checks TensorFlow, loads it quietly
from gaviz import demo, pitfalls
from gaviz.batchnorm import batch_dependence
from gaviz.compare import Run, compare_steps
from gaviz.history import History, Update
from gaviz.measure import Comparison, compare_with_exact
from gaviz.memory import MemoryReport, measure_peak_memory
from gaviz.pitfalls import PITFALLS
from gaviz.plotting import plot_histories
from gaviz.trainer import AccumulationTrainer
from gaviz.widgets import Dashboard, LivePlot, dashboard

__all__ = [
    "PITFALLS",
    "AccumulationTrainer",
    "Comparison",
    "compare_with_exact",
    "MemoryReport",
    "measure_peak_memory",
    "pitfalls",
    "History",
    "Run",
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
