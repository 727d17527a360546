"""Live widgets: a dashboard to compare accumulation step counts, and a
live-plot callback for your own ``AccumulationTrainer.fit`` or ``model.fit``.

Training runs in a background thread, so the kernel keeps answering widget
messages (a Stop button in a busy kernel does nothing). The thread only sets
widget traits; the figure is a matplotlib ``Figure`` (no pyplot state)
rendered to PNG into an ``ipywidgets.Image``, so it works in JupyterLab 4
with no extension to build, and in tests with no display at all.

The dashboard's controls are a :class:`~gaviz.widgets.dashboard_form.DashboardForm`;
the live plot is :class:`~gaviz.widgets.liveplot.LivePlot`.
"""

from __future__ import annotations

import base64
import html
import inspect
import math
import threading

from gaviz import demo
from gaviz._arguments import check_one_of
from gaviz.plotting import X_AXES, CurveFigure
from gaviz.training.window.tail import POLICIES as TAIL_POLICIES
from gaviz.widgets.dashboard_form import STEP_CHOICES, DashboardForm
from gaviz.widgets.liveplot import CurveRenderer, LivePlot
from gaviz.widgets.runs import DEMO_TRAINERS, EXACT, HOLDS, RunPlan, RunResult, plan_runs, train_run

__all__ = ["Dashboard", "LivePlot", "dashboard"]

#: The form's widgets, each also an attribute of the dashboard under its name.
_FORM_WIDGETS = ("steps", "hold", "micro_batch_size", "effective_batch_size", "learning_rate",
                 "optimizer", "epochs", "preset", "tail", "trainer", "warmup", "x_axis",
                 "run_button", "stop_button", "plan", "status", "progress", "summary", "image",
                 "widget")


class Dashboard:
    """Choose accumulation steps and watch effective-batch loss curves.

    Build it with :func:`dashboard`; display it by leaving it last in a cell.
    ``run()``/``stop()``/``wait()`` do what the buttons do, for scripts and
    tests; ``results`` holds one :class:`RunResult` per configuration. Its
    controls (``steps``, ``hold``... ``run_button``, ``plan``, ``image``) are
    those of its ``form``, a :class:`~gaviz.widgets.dashboard_form.DashboardForm`.

    Raises:
        TypeError: a setting it does not know.
        ValueError: a setting none of the controls offers.
    """

    def __init__(self, steps=(1, 2, 4, 8), micro_batch_size=32, effective_batch_size=256,
                 hold="effective", learning_rate=0.01, optimizer="adam", epochs=3,
                 preset="regression", tail="flush", trainer=EXACT, x_axis="samples",
                 seed=0, min_redraw_interval=0.25, warmup=False, **unknown):
        _check_settings(unknown, steps=steps, hold=hold, optimizer=optimizer, preset=preset,
                        tail=tail, trainer=trainer, x_axis=x_axis)
        self.form = DashboardForm(
            steps=steps, micro_batch_size=micro_batch_size,
            effective_batch_size=effective_batch_size, hold=hold,
            learning_rate=learning_rate, optimizer=optimizer, epochs=epochs, preset=preset,
            tail=tail, trainer=trainer, x_axis=x_axis, warmup=warmup)
        for name in _FORM_WIDGETS:
            setattr(self, name, getattr(self.form, name))

        self.seed = seed
        self.min_redraw_interval = min_redraw_interval
        self.results: list[RunResult] = []
        self.figure = None
        self._thread = None
        self._stop_requested = False
        self._current = None

        self.form.on_settings_change.append(self._show_plan)
        self.form.on_x_axis_change.append(self._replot)
        self.form.on_run.append(self.run)
        self.form.on_stop.append(self.stop)
        self._show_plan()

    @property
    def _settings(self):
        """The controls a run reads (the form's)."""
        return self.form.settings

    # ------------------------------------------------------------ planning

    def planned_runs(self) -> list[RunPlan]:
        """The configurations a Run would train; ValueError for impossible ones."""
        preset = demo.PRESETS[self.preset.value]
        return plan_runs(
            sorted(self.steps.value), self.hold.value, self.effective_batch_size.value,
            self.micro_batch_size.value, samples=preset["samples"], tail=self.tail.value,
            epochs=self.epochs.value, trainer=self.trainer.value,
            optimizer=self.optimizer.value, learning_rate=self.learning_rate.value,
            hidden=preset["hidden"], seed=self.seed, warmup=self.warmup.value,
        )

    def _show_plan(self):
        try:
            plans = self.planned_runs()
        except ValueError as error:
            self.plan.value = _status_html(str(error), error=True)
            return
        self.plan.value = _plan_html(plans)

    # ------------------------------------------------------------ running

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> bool:
        """Starts training every planned configuration in a background thread.

        Returns False (and says why in the status line) when nothing starts.
        """
        if self.running:
            return False
        try:
            plans = self.planned_runs()
        except ValueError as error:
            self._say(str(error), error=True)
            return False
        self.results = [RunResult(plan) for plan in plans]
        self.figure = CurveFigure(self.x_axis.value, title=self._title())
        self.form.show_plot(self.figure.png())  # the empty axes, until the first curve
        self.progress.max = max(1, sum(p.updates_per_epoch for p in plans) * self.epochs.value)
        self.progress.value = 0
        self.summary.value = ""
        self._stop_requested = False
        self._set_running(True)
        self._say("running…")
        self._thread = threading.Thread(target=self._train_all, daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Asks the running configuration to stop after its current window."""
        self._stop_requested = True
        if self._current is not None:
            self._current.stop_training = True

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until the background run ends; True if it did within ``timeout``."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _train_all(self):
        try:
            plan = self.results[0].plan
            x, y = demo.make_data(plan.samples, seed=plan.seed)
            for result in self.results:
                if self._stop_requested:
                    break
                self._train_one(result, x, y)
            self._say(_end_message(self.results, stopped=self._stop_requested),
                      error=any(r.error for r in self.results))
        except Exception as error:  # noqa: BLE001 - shown in the dashboard, never lost
            self._say(f"{type(error).__name__}: {error}", error=True)
        finally:
            self._draw()
            self.summary.value = _summary_html(self.results)
            self._current = None
            self._set_running(False)

    def _train_one(self, result, x, y):
        """Trains one planned run into ``result``, whose history grows live."""
        plan = result.plan
        # The dashboard's figure and image, drawn by the same throttled
        # callback users plug into their own fit.
        live = LivePlot(plan.label, figure=self.figure, image=self.image,
                        min_interval=self.min_redraw_interval)

        def on_start(trainer):
            self._current = trainer
            if self._stop_requested:
                trainer.stop_training = True

        def on_update(update):
            live(update)
            self.progress.value = min(self.progress.max, self.progress.value + 1)
            if self._stop_requested:
                self._current.stop_training = True

        train_run(plan, x, y, on_update=on_update, on_start=on_start, result=result)
        self._draw()

    # ------------------------------------------------------------ display

    def _title(self):
        return (f"{self.trainer.value} trainer, {self.optimizer.value}, "
                f"lr {self.learning_rate.value:.3g}, tail={self.tail.value}")

    def _draw(self):
        if self.figure is None:
            return
        # The renderer every run's LivePlot draws with, forced: the finished state.
        renderer = CurveRenderer(self.figure, self.image)
        for result in self.results:
            if result.history:
                renderer.draw_updates(result.plan.label, result.history)
        renderer.show()

    def _replot(self):
        """Redraws finished runs against another x axis."""
        if self.running or not self.results:
            return
        self.figure = CurveFigure(self.x_axis.value, title=self._title())
        self._draw()

    def _say(self, message, error=False):
        self.status.value = _status_html(message, error)

    def _set_running(self, running):
        self.form.set_running(running)

    def _repr_mimebundle_(self, **kwargs):
        """The form, as a widget; and, for a page that shows no widgets (a notebook
        saved with its outputs, the documentation site), its status, plot and
        summary as HTML. JupyterLab prefers the widget."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = "gaviz dashboard (a widget: run the notebook in JupyterLab)"
        bundle["text/html"] = static_html(self.status.value, self.image.value,
                                          self.summary.value)
        return bundle


# ------------------------------------------------------------ HTML, from plain objects


def static_html(status: str, png: bytes, summary: str) -> str:
    """The dashboard as a page without widgets shows it: status, plot (once drawn), summary."""
    picture = (f"<img src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}' "
               "width='680'/>" if png else "")
    return f"<div>{status}<br/>{picture}<div class='gaviz-summary'>{summary}</div></div>"


def _status_html(message: str, error: bool = False) -> str:
    """A status line: red for an error, green otherwise."""
    color = "#b00" if error else "#060"
    return f"<span style='color:{color}'>{html.escape(message)}</span>"


def _plan_html(plans: list[RunPlan]) -> str:
    """The planned runs, one item each, with their updates per epoch."""
    rows = "".join(
        f"<li>{html.escape(p.label)}: {p.updates_per_epoch} updates per epoch</li>"
        for p in plans)
    return f"<b>Planned runs</b><ul style='margin:2px 0'>{rows}</ul>"


def _end_message(results: list[RunResult], stopped: bool) -> str:
    """How a Run ended: stopped or finished, its updates and seconds, and each failure."""
    failed = [r for r in results if r.error]
    message = "stopped" if stopped else "finished"
    message += f": {sum(len(r.history) for r in results)} updates in " \
               f"{sum(r.seconds for r in results):.1f} s"
    if failed:
        message += "; " + "; ".join(f"{r.plan.label}: {r.error}" for r in failed)
    return message


def _summary_html(results: list[RunResult]) -> str:
    """One table row per run: its batch sizes, speed, final loss and distance from exact."""
    head = ("<tr><th>k</th><th>micro</th><th>effective</th><th>updates</th>"
            "<th>samples/s</th><th>final loss</th><th>distance from exact</th></tr>")
    rows = []
    finals = column_text([r.history.loss[-1] if r.history else None for r in results])
    distances = column_text([r.distance_from_exact for r in results])
    for r, final, distance in zip(results, finals, distances):
        rows.append(
            f"<tr><td>{r.plan.accumulation_steps}</td><td>{r.plan.micro_batch_size}</td>"
            f"<td>{r.plan.effective_batch_size}</td><td>{len(r.history)}</td>"
            f"<td>{r.samples_per_second:,.0f}</td><td>{final}</td><td>{distance}</td></tr>")
    style = "<style>.gaviz-summary td, .gaviz-summary th {padding: 2px 10px; text-align: right}</style>"
    return f"{style}<table>{head}{''.join(rows)}</table>"


def column_text(values, significant: int = 3, most_decimals: int = 8) -> list:
    """``values`` as a table column shows them: one number of decimals for all, enough
    for ``significant`` digits of the smallest (at most ``most_decimals``); None is "–".

    ``[1.3, 2.048, 0.02214]`` -> ``["1.3000", "2.0480", "0.0221"]``.
    """
    sizes = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    smallest = min(sizes, default=1.0)
    decimals = min(most_decimals, max(0, significant - 1 - math.floor(math.log10(smallest))))
    return ["–" if v is None else f"{v:.{decimals}f}" for v in values]


def _check_settings(unknown, steps, hold, optimizer, preset, tail, trainer, x_axis):
    """Checks the dashboard's settings once, before any widget is built."""
    if unknown:
        known = [name for name in inspect.signature(Dashboard).parameters if name != "unknown"]
        raise TypeError(f"dashboard() got unknown settings: {sorted(unknown)}. It takes: "
                        f"{', '.join(known)}")
    for k in steps:
        check_one_of("steps", k, STEP_CHOICES)
    check_one_of("hold", hold, HOLDS)
    check_one_of("optimizer", optimizer, sorted(demo.OPTIMIZERS))
    check_one_of("preset", preset, demo.PRESETS)
    check_one_of("tail", tail, TAIL_POLICIES)
    check_one_of("trainer", trainer, DEMO_TRAINERS)
    check_one_of("x_axis", x_axis, X_AXES)


def dashboard(**settings) -> Dashboard:
    """Shows the accumulation dashboard: ``gaviz.dashboard()`` in a notebook cell.

    Keyword arguments set the controls' starting values (``steps``,
    ``micro_batch_size``, ``effective_batch_size``, ``hold``,
    ``learning_rate``, ``optimizer``, ``epochs``, ``preset``, ``tail``,
    ``trainer``, ``x_axis``, ``warmup``), checked by :class:`Dashboard`.
    """
    return Dashboard(**settings)
