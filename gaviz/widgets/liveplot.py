"""A live loss curve: for ``AccumulationTrainer.fit`` (``on_update``) and for
``model.fit`` (a Keras callback), both drawn by one renderer.

Each mode only records: ``on_update`` appends gaviz's per-update records to a
:class:`~gaviz.training.fit.history.History`, the Keras callback appends what Keras passes
to a :class:`~gaviz.widgets.keraslog.KerasLog`. A :class:`CurveRenderer` draws the two
records into a :class:`~gaviz.plotting.CurveFigure` and shows it as a PNG in an
``ipywidgets.Image``, at most once per ``min_interval`` seconds.
"""

from __future__ import annotations

import base64
import math
import time

import ipywidgets as widgets
import keras

from gaviz.plotting import (
    EFFECTIVE_LOSS,
    KERAS_LOSS,
    X_AXES,
    CurveFigure,
    epoch_points,
    keras_x_label,
    running_mean_curve,
)
from gaviz.training.fit.history import History
from gaviz.widgets.keraslog import KerasLog


class CurveRenderer:
    """Draws one run's records into a figure and shows it in an image, throttled.

    Several renderers (one per run) may share a figure and an image, as the
    dashboard's runs do; each draws only its own lines.

    Attributes:
        figure: the :class:`~gaviz.plotting.CurveFigure` drawn into.
        image: what shows it (anything with a ``value`` to hold PNG bytes).
        min_interval: the fewest seconds between two shows, unless forced.
    """

    def __init__(self, figure: CurveFigure, image, min_interval: float = 0.25):
        self.figure, self.image, self.min_interval = figure, image, min_interval
        self._last_show = -math.inf  # the first record is shown at once

    def render(self, label: str, history, keras_log, force: bool = False) -> bool:
        """Draws and shows the records if ``force`` or ``min_interval`` has passed.

        gaviz's per-update records win over Keras's logs: with both, only the
        effective-batch curve is drawn (a Keras curve drawn before is taken
        off), so no update appears twice. Returns whether it drew.
        """
        if not force and time.perf_counter() - self._last_show < self.min_interval:
            return False
        if history or not keras_log:
            self.draw_updates(label, history)
        else:
            self.draw_keras_log(label, keras_log)
        self.show()
        return True

    def draws_keras_log(self, label: str) -> bool:
        """Whether the figure holds ``label``'s Keras curve."""
        return keras_lines(label)[0] in self.figure.lines

    def draw_updates(self, label: str, history) -> None:
        """One point per update: its effective-batch loss."""
        for key in keras_lines(label):
            self.figure.remove(key)
        self.figure.label_axes(X_AXES[self.figure.x_axis][0], EFFECTIVE_LOSS)
        self.figure.update(label, history)

    def draw_keras_log(self, label: str, log) -> None:
        """Keras's running means, one segment per epoch; each epoch's loss (and
        val_loss) a marker where it ended."""
        running, epoch, val = keras_lines(label)
        x_axis = self.figure.x_axis
        self.figure.label_axes(keras_x_label(x_axis), KERAS_LOSS)
        self.figure.set_line(running, *running_mean_curve(log, x_axis),
                             legend=f"{label}: loss, running mean over the epoch")
        color = self.figure.lines[running].get_color()
        self.figure.set_line(epoch, *epoch_points(log, x_axis), "o", color=color,
                             legend=f"{label}: epoch loss")
        val_xs, val_ys = epoch_points(log, x_axis, "val_loss")
        if val_xs:
            self.figure.set_line(val, val_xs, val_ys, "s", color=color, fillstyle="none",
                                 legend=f"{label}: val_loss")

    def show(self) -> None:
        """Renders the figure into the image now."""
        self.image.value = self.figure.png()
        self._last_show = time.perf_counter()


def keras_lines(label: str) -> tuple:
    """The figure's keys of ``label``'s Keras curves: running mean, epoch loss, val_loss."""
    return (f"{label} (Keras running mean)", f"{label} (Keras epoch loss)",
            f"{label} (Keras val_loss)")


class LivePlot(keras.callbacks.Callback):
    """Draws a loss curve live: for ``AccumulationTrainer.fit`` and for ``model.fit``.

    In a notebook cell, leave the plot last (or ``display`` it) and train:

    - ``trainer.fit(ds, on_update=LivePlot())``: one point per applied update,
      the loss of its effective batch, against ``x_axis``; the records are the
      :class:`~gaviz.training.fit.history.Update` objects in ``history``.
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
      ``keras_log`` (a :class:`~gaviz.widgets.keraslog.KerasLog`).

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
        self.history = History()
        self.keras_log = KerasLog()
        figure = figure or CurveFigure(x_axis, title=f"{label}: loss, drawn as it trains")
        if image is None:  # drawn at once: an Image with no value shows a broken-image icon
            image = widgets.Image(value=figure.png(), format="png",
                                  layout=widgets.Layout(width="640px"))
        self.renderer = CurveRenderer(figure, image, min_interval)
        self._started = None

    @property
    def figure(self) -> CurveFigure:
        return self.renderer.figure

    @property
    def image(self):
        return self.renderer.image

    @property
    def min_interval(self) -> float:
        return self.renderer.min_interval

    @min_interval.setter
    def min_interval(self, seconds: float) -> None:
        self.renderer.min_interval = seconds

    # ------------------------------------------------------------ on_update

    def __call__(self, update) -> None:
        self.history.append(update)
        # The first update replaces a Keras curve at once.
        self._render(force=self.renderer.draws_keras_log(self.label))

    # ------------------------------------------------------------ Keras callback

    def on_train_begin(self, logs=None):
        if self._started is None:
            self._started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.keras_log.begin_epoch(epoch)

    def on_train_batch_end(self, batch, logs=None):
        self.keras_log.end_batch(batch, logs, self._seconds())
        if not self.history:  # with on_update records, __call__ draws
            self._render()

    def on_epoch_end(self, epoch, logs=None):
        self.keras_log.end_epoch(epoch, logs, self._seconds())
        if not self.history:
            self._render()

    def on_train_end(self, logs=None):
        self.redraw()

    # ------------------------------------------------------------ drawing

    def redraw(self) -> None:
        """Draws the records now, whatever the throttle."""
        self._render(force=True)

    def _render(self, force=False):
        self.renderer.render(self.label, self.history, self.keras_log, force=force)

    def _seconds(self):
        if self._started is None:
            self._started = time.perf_counter()
        return time.perf_counter() - self._started

    def _repr_mimebundle_(self, **kwargs):
        """The plot, as a widget; and, for a page that shows no widgets (a notebook
        saved with its outputs, the documentation site), its last frame as a PNG."""
        bundle = self.image._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = f"LivePlot {self.label!r} (a widget: run the notebook in JupyterLab)"
        if self.image.value:
            bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle
