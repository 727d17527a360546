"""What a notebook shows live: the ``dashboard`` (its controls in
``dashboard_form``), the ``LivePlot`` callback (``liveplot``, reading Keras's
log through ``keraslog``), and the runs they share with the command line
(``runs``, ``compare``).
"""

from gaviz.widgets.compare import compare_steps
from gaviz.widgets.dashboard_widget import Dashboard, dashboard
from gaviz.widgets.liveplot import LivePlot
from gaviz.widgets.runs import RunPlan, RunResult

__all__ = ["Dashboard", "LivePlot", "RunPlan", "RunResult", "compare_steps", "dashboard"]
