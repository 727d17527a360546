"""Live widgets: a dashboard to compare accumulation step counts, and a
live-plot callback for your own ``AccumulationTrainer.fit`` or ``model.fit``.

Training runs in a background thread, so the kernel keeps answering widget
messages (a Stop button in a busy kernel does nothing). The thread only sets
widget traits; the figure is a matplotlib ``Figure`` (no pyplot state)
rendered to PNG into an ``ipywidgets.Image``, so it works in JupyterLab 4
with no extension to build, and in tests with no display at all.
"""

from __future__ import annotations

import html
import inspect
import math
import threading
import time

import ipywidgets as widgets
import keras

from gaviz import demo
from gaviz.checks import check_one_of
from gaviz.history import History
from gaviz.pitfalls import PITFALLS
from gaviz.keraslog import KerasLog
from gaviz.plotting import (EFFECTIVE_LOSS, KERAS_LOSS, X_AXES, CurveFigure, epoch_points,
                            keras_x_label, running_mean_curve)
from gaviz.runs import EXACT, HOLDS, RunPlan, RunResult, plan_runs, train_run


class LivePlot(keras.callbacks.Callback):
    """Draws a loss curve live: for ``AccumulationTrainer.fit`` and for ``model.fit``.

    In a notebook cell, leave the plot last (or ``display`` it) and train:

    - ``trainer.fit(ds, on_update=LivePlot())``: one point per applied update,
      the loss of its effective batch, against ``x_axis``; the records are the
      :class:`~gaviz.history.Update` objects in ``history``.
    - ``model.fit(x, y, callbacks=[LivePlot()])`` (it is a
      ``keras.callbacks.Callback``): one point per ``on_train_batch_end``, the
      ``logs["loss"]`` Keras passes. In Keras 3 that is the running mean of
      the epoch's batch losses so far, as the progress bar shows, not the
      batch's own loss: it restarts at each epoch with one batch's loss and
      smooths towards the epoch's value. So the legend says "running mean
      over the epoch", each epoch is its own segment, and each epoch's value
      (``on_epoch_end``'s ``loss``, as ``model.history``; and ``val_loss``
      with validation) is a marker where the epoch ended. Keras tells
      callbacks no batch size, so x counts training steps (batches, one
      optimizer update each in plain Keras) for ``x_axis`` ``"samples"`` or
      ``"updates"``, and seconds for ``"seconds"``. The records are in
      ``keras_log`` (a :class:`~gaviz.keraslog.KerasLog`).

    Given both ways at once (``on_update=live`` and ``callbacks=[live]`` to
    a trainer that calls Keras's batch callbacks once per update, their logs
    running means), the per-update records win: only the effective-batch
    curve of ``history`` is drawn, once per update (a Keras curve drawn
    before the first update is taken off then), and Keras's logs are kept in
    ``keras_log`` but not drawn, so no update appears twice.

    Redraws are throttled to one per ``min_interval`` seconds;
    ``on_train_end`` draws the last state (with ``on_update`` alone, call
    ``redraw()``). Several runs can share one ``figure`` with different
    labels, all drawn the same way. A plot reused for another fit continues
    its curve.
    """

    def __init__(self, label: str = "run", x_axis: str = "samples", figure=None,
                 image=None, min_interval: float = 0.25):
        super().__init__()
        self.label = label
        self.figure = figure or CurveFigure(x_axis)
        self.image = image or widgets.Image(format="png", layout=widgets.Layout(width="640px"))
        self.history = History()
        self.keras_log = KerasLog()
        self.min_interval = min_interval
        self._last_draw = -math.inf  # the first point is drawn at once
        self._started = None

    # ------------------------------------------------------------ on_update

    def __call__(self, update) -> None:
        self.history.append(update)
        if self._keras_lines()[0] in self.figure.lines:
            self.redraw()  # the first update replaces the Keras curve at once
        else:
            self._maybe_redraw()

    # ------------------------------------------------------------ Keras callback

    def on_train_begin(self, logs=None):
        if self._started is None:
            self._started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.keras_log.begin_epoch(epoch)

    def on_train_batch_end(self, batch, logs=None):
        self.keras_log.end_batch(batch, logs, self._seconds())
        if not self.history:  # with on_update records, __call__ draws
            self._maybe_redraw()

    def on_epoch_end(self, epoch, logs=None):
        self.keras_log.end_epoch(epoch, logs, self._seconds())
        if not self.history:
            self._maybe_redraw()

    def on_train_end(self, logs=None):
        self.redraw()

    # ------------------------------------------------------------ drawing

    def redraw(self) -> None:
        if self.history or not self.keras_log:
            self._draw_updates()
        else:
            self._draw_keras_log()
        self.image.value = self.figure.png()
        self._last_draw = time.perf_counter()

    def _maybe_redraw(self):
        if time.perf_counter() - self._last_draw >= self.min_interval:
            self.redraw()

    def _draw_updates(self):
        for key in self._keras_lines():
            self.figure.remove(key)
        self.figure.label_axes(X_AXES[self.figure.x_axis][0], EFFECTIVE_LOSS)
        self.figure.update(self.label, self.history)

    def _draw_keras_log(self):
        running, epoch, val = self._keras_lines()
        x_axis = self.figure.x_axis
        self.figure.label_axes(keras_x_label(x_axis), KERAS_LOSS)
        self.figure.set_line(running, *running_mean_curve(self.keras_log, x_axis),
                             legend=f"{self.label}: loss, running mean over the epoch")
        color = self.figure.lines[running].get_color()
        self.figure.set_line(epoch, *epoch_points(self.keras_log, x_axis), "o", color=color,
                             legend=f"{self.label}: epoch loss")
        val_xs, val_ys = epoch_points(self.keras_log, x_axis, "val_loss")
        if val_xs:
            self.figure.set_line(val, val_xs, val_ys, "s", color=color, fillstyle="none",
                                 legend=f"{self.label}: val_loss")

    def _keras_lines(self):
        """The figure's keys of the Keras curves: running mean, epoch loss, val_loss."""
        return (f"{self.label} (Keras running mean)", f"{self.label} (Keras epoch loss)",
                f"{self.label} (Keras val_loss)")

    def _seconds(self):
        if self._started is None:
            self._started = time.perf_counter()
        return time.perf_counter() - self._started

    def _repr_mimebundle_(self, **kwargs):
        return self.image._repr_mimebundle_(**kwargs)


#: The settings' labels, one width, so their controls line up.
_SETTING_STYLE = {"description_width": "150px"}


class _DashboardForm:
    """The dashboard's controls and their layout: every setting a run reads,
    the run controls and the outputs, as widget attributes of the dashboard."""

    def _add_batch_settings(self, wide, steps, hold, micro_batch_size, effective_batch_size):
        """The first column: which k to compare, and which batch size they share."""
        style = _SETTING_STYLE
        self.steps = widgets.SelectMultiple(
            options=[1, 2, 4, 8, 16, 32], value=tuple(steps), rows=6,
            description="accumulation steps", style=style, layout=wide)
        self.hold = widgets.ToggleButtons(
            options=[("hold effective batch", "effective"), ("hold micro-batch", "micro")],
            value=hold, style={"button_width": "150px"})
        self.micro_batch_size = widgets.BoundedIntText(
            value=micro_batch_size, min=1, max=1 << 20, description="micro-batch",
            style=style, layout=wide)
        self.effective_batch_size = widgets.BoundedIntText(
            value=effective_batch_size, min=1, max=1 << 20, description="effective batch",
            style=style, layout=wide)

    def _add_training_settings(self, wide, learning_rate, optimizer, epochs, preset, tail,
                               trainer, warmup):
        """The second column: what every run trains, and how."""
        style = _SETTING_STYLE
        self.learning_rate = widgets.FloatLogSlider(
            value=learning_rate, base=10, min=-4, max=0.5, step=0.1, readout_format=".4f",
            description="learning rate", style=style, layout=wide)
        self.optimizer = widgets.Dropdown(
            options=sorted(demo.OPTIMIZERS), value=optimizer, description="optimizer",
            style=style, layout=wide)
        self.epochs = widgets.IntSlider(value=epochs, min=1, max=30, description="epochs",
                                        style=style, layout=wide)
        self.preset = widgets.Dropdown(options=list(demo.PRESETS), value=preset,
                                       description="demo problem", style=style, layout=wide)
        self.tail = widgets.Dropdown(options=["flush", "drop", "carry"], value=tail,
                                     description="tail", style=style, layout=wide)
        self.trainer = widgets.Dropdown(options=[EXACT, *PITFALLS], value=trainer,
                                        description="trainer", style=style, layout=wide)
        self.warmup = widgets.Checkbox(
            value=warmup, description="warm up k: 1, 2, 4... per epoch", indent=False,
            layout=wide)

    def _add_run_controls(self, x_axis):
        """The Run and Stop buttons and the x axis, which redraws without a run."""
        self.x_axis = widgets.ToggleButtons(options=list(X_AXES), value=x_axis,
                                            style={"button_width": "80px"},
                                            layout=widgets.Layout(width="auto"))
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True)

    def _add_outputs(self):
        """The plan, status, progress, plot and summary.

        Then the CSS classes the summary's style and the browser tests find widgets by.
        """
        self.plan = widgets.HTML()
        self.status = widgets.HTML("ready")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.summary = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="680px"))
        for box, name in [(self.steps, "gaviz-steps"), (self.run_button, "gaviz-run"),
                          (self.stop_button, "gaviz-stop"), (self.status, "gaviz-status"),
                          (self.plan, "gaviz-plan"), (self.image, "gaviz-plot"),
                          (self.summary, "gaviz-summary")]:
            box.add_class(name)

    def _observe_controls(self):
        """Re-plans when a setting changes, redraws when the x axis does; connects the buttons."""
        for control in self._settings:
            control.observe(lambda _: self._show_plan(), names="value")
        self.x_axis.observe(lambda _: self._replot(), names="value")
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())

    def _arranged(self):
        """The whole dashboard: settings in two columns, then plan, buttons, status and plot."""
        return widgets.VBox([
            widgets.HBox([
                widgets.VBox([self.steps, self.hold, self.micro_batch_size,
                              self.effective_batch_size]),
                widgets.VBox([self.learning_rate, self.optimizer, self.epochs, self.preset,
                              self.tail, self.trainer, self.warmup]),
            ]),
            self.plan,
            widgets.HBox([self.run_button, self.stop_button, self.progress, self.x_axis]),
            self.status, self.image, self.summary,
        ])


class Dashboard(_DashboardForm):
    """Choose accumulation steps and watch effective-batch loss curves.

    Build it with :func:`dashboard`; display it by leaving it last in a cell.
    ``run()``/``stop()``/``wait()`` do what the buttons do, for scripts and
    tests; ``results`` holds one :class:`RunResult` per configuration.
    """

    def __init__(self, steps=(1, 2, 4, 8), micro_batch_size=32, effective_batch_size=256,
                 hold="effective", learning_rate=0.01, optimizer="adam", epochs=3,
                 preset="regression", tail="flush", trainer=EXACT, x_axis="samples",
                 seed=0, min_redraw_interval=0.25, warmup=False):
        wide = widgets.Layout(width="360px")  # one layout for both columns of settings
        self._add_batch_settings(wide, steps, hold, micro_batch_size, effective_batch_size)
        self._add_training_settings(wide, learning_rate, optimizer, epochs, preset, tail,
                                    trainer, warmup)
        self._add_run_controls(x_axis)
        self._add_outputs()

        self.seed = seed
        self.min_redraw_interval = min_redraw_interval
        self.results: list[RunResult] = []
        self.figure = None
        self._thread = None
        self._stop_requested = False
        self._current = None

        # What a run reads: the plan follows them, and a run disables them.
        self._settings = [self.steps, self.hold, self.micro_batch_size, self.effective_batch_size,
                          self.learning_rate, self.optimizer, self.epochs, self.preset,
                          self.tail, self.trainer, self.warmup, self.x_axis]
        self._observe_controls()
        self._show_plan()
        self.widget = self._arranged()

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
        for result in self.results:
            if result.history:
                self.figure.update(result.plan.label, result.history)
        self.image.value = self.figure.png()

    def _replot(self):
        """Redraws finished runs against another x axis."""
        if self.running or not self.results:
            return
        self.figure = CurveFigure(self.x_axis.value, title=self._title())
        self._draw()

    def _say(self, message, error=False):
        self.status.value = _status_html(message, error)

    def _set_running(self, running):
        for control in self._settings:
            control.disabled = running
        self.run_button.disabled = running
        self.stop_button.disabled = not running

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


# ------------------------------------------------------------ HTML, from plain objects


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
    for r in results:
        final = f"{r.history.loss[-1]:.4g}" if r.history else "–"
        distance = "–" if r.distance_from_exact is None else f"{r.distance_from_exact:.3g}"
        rows.append(
            f"<tr><td>{r.plan.accumulation_steps}</td><td>{r.plan.micro_batch_size}</td>"
            f"<td>{r.plan.effective_batch_size}</td><td>{len(r.history)}</td>"
            f"<td>{r.samples_per_second:,.0f}</td><td>{final}</td><td>{distance}</td></tr>")
    style = "<style>.gaviz-summary td, .gaviz-summary th {padding: 2px 10px; text-align: right}</style>"
    return f"{style}<table>{head}{''.join(rows)}</table>"


def dashboard(**settings) -> Dashboard:
    """Shows the accumulation dashboard: ``gaviz.dashboard()`` in a notebook cell.

    Keyword arguments set the controls' starting values (``steps``,
    ``micro_batch_size``, ``effective_batch_size``, ``hold``,
    ``learning_rate``, ``optimizer``, ``epochs``, ``preset``, ``tail``,
    ``trainer``, ``x_axis``).
    """
    unknown = set(settings) - set(inspect.signature(Dashboard).parameters)
    if unknown:
        raise TypeError(f"dashboard() got unknown settings: {sorted(unknown)}")
    if "hold" in settings:
        check_one_of("hold", settings["hold"], HOLDS)
    return Dashboard(**settings)
