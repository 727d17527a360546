"""The dashboard's form: its controls, their layout and their events.

The form knows nothing of training: it holds every setting a run reads, the
Run and Stop buttons and the outputs, and tells its listeners when a setting
changes or a button is pressed. :class:`~gaviz.widgets.dashboard_widget.Dashboard` listens and
runs; a test can build the form alone, change a value and see the event.
"""

from __future__ import annotations

from typing import Callable

import ipywidgets as widgets

from gaviz import demo
from gaviz.plotting import X_AXES
from gaviz.training.window.tail import POLICIES as TAIL_POLICIES
from gaviz.widgets.runs import DEMO_TRAINERS, EXACT

#: The accumulation steps the form offers.
STEP_CHOICES = (1, 2, 4, 8, 16, 32)
#: The settings' labels, one width, so their controls line up.
_SETTING_STYLE = {"description_width": "150px"}
#: The CSS classes the summary's style and the browser tests find widgets by.
_CSS_CLASSES = {"steps": "gaviz-steps", "micro_batch_size": "gaviz-micro-batch",
                "run_button": "gaviz-run", "stop_button": "gaviz-stop",
                "status": "gaviz-status", "plan": "gaviz-plan", "image": "gaviz-plot",
                "summary": "gaviz-summary"}


class DashboardForm:
    """Every setting a run reads, the run controls and the outputs, laid out.

    Each control is an attribute named as its setting (``steps``, ``hold``,
    ``micro_batch_size``, ``effective_batch_size``, ``learning_rate``,
    ``optimizer``, ``epochs``, ``preset``, ``tail``, ``trainer``, ``warmup``,
    ``x_axis``); then ``run_button``, ``stop_button``, and the outputs
    ``plan``, ``status``, ``progress``, ``image`` and ``summary``. ``widget``
    is the whole form.

    Events, each a list of listeners called with no argument:
    ``on_settings_change`` (any setting's value, the x axis's too),
    ``on_x_axis_change``, ``on_run`` and ``on_stop`` (the buttons).

    Values are not checked here: :class:`~gaviz.widgets.dashboard_widget.Dashboard` checks them
    before building the form.
    """

    def __init__(self, steps=(1, 2, 4, 8), micro_batch_size=32, effective_batch_size=256,
                 hold="effective", learning_rate=0.01, optimizer="adam", epochs=3,
                 preset="regression", tail="flush", trainer=EXACT, x_axis="samples",
                 warmup=False):
        self.on_settings_change: list[Callable[[], None]] = []
        self.on_x_axis_change: list[Callable[[], None]] = []
        self.on_run: list[Callable[[], None]] = []
        self.on_stop: list[Callable[[], None]] = []
        wide = widgets.Layout(width="360px")  # one layout for both columns of settings
        self._add_batch_settings(wide, steps, hold, micro_batch_size, effective_batch_size)
        self._add_training_settings(wide, learning_rate, optimizer, epochs, preset, tail,
                                    trainer, warmup)
        self._add_run_controls(x_axis)
        self._add_outputs()
        # What a run reads: a change is an event, and a run disables them.
        self.settings = [self.steps, self.hold, self.micro_batch_size,
                         self.effective_batch_size, self.learning_rate, self.optimizer,
                         self.epochs, self.preset, self.tail, self.trainer, self.warmup,
                         self.x_axis]
        self._observe_controls()
        self._disable_derived_batch()
        self.widget = self._arranged()

    def set_running(self, running: bool) -> None:
        """Disables the settings and Run while a run goes on; Stop only then."""
        for control in self.settings:
            control.disabled = running
        self.run_button.disabled = running
        self.stop_button.disabled = not running
        if not running:
            self._disable_derived_batch()

    def show_plot(self, png: bytes) -> None:
        """Shows ``png`` in the plot (hidden until then)."""
        self.image.value = png
        self.image.layout.display = None

    def _disable_derived_batch(self) -> None:
        """Disables the batch size the held one decides: holding the effective batch,
        each run's micro-batch is effective // k, and holding the micro-batch, each
        run's effective batch is micro * k (:func:`gaviz.widgets.runs.batch_sizes`)."""
        self.micro_batch_size.disabled = self.hold.value == "effective"
        self.effective_batch_size.disabled = self.hold.value == "micro"

    # ------------------------------------------------------------ building

    def _add_batch_settings(self, wide, steps, hold, micro_batch_size, effective_batch_size):
        """The first column: which k to compare, and which batch size they share."""
        style = _SETTING_STYLE
        self.steps = widgets.SelectMultiple(
            options=list(STEP_CHOICES), value=tuple(steps), rows=6,
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
        self.tail = widgets.Dropdown(options=list(TAIL_POLICIES), value=tail,
                                     description="tail", style=style, layout=wide)
        self.trainer = widgets.Dropdown(options=list(DEMO_TRAINERS), value=trainer,
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
        """The plan, status, progress, plot and summary; then the CSS classes."""
        self.plan = widgets.HTML()
        self.status = widgets.HTML("ready")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.summary = widgets.HTML()
        # Hidden until a run draws into it: an Image with no value shows a broken-image icon.
        self.image = widgets.Image(format="png",
                                   layout=widgets.Layout(width="680px", display="none"))
        for name, css_class in _CSS_CLASSES.items():
            getattr(self, name).add_class(css_class)

    def _observe_controls(self):
        """Turns the widgets' changes and clicks into the form's events."""
        for control in self.settings:
            control.observe(lambda _: _notify(self.on_settings_change), names="value")
        self.hold.observe(lambda _: self._disable_derived_batch(), names="value")
        self.x_axis.observe(lambda _: _notify(self.on_x_axis_change), names="value")
        self.run_button.on_click(lambda _: _notify(self.on_run))
        self.stop_button.on_click(lambda _: _notify(self.on_stop))

    def _arranged(self):
        """The whole form: settings in two columns, then plan, buttons, status and plot."""
        return widgets.VBox([
            # In a narrow notebook the second column goes below the first, not off the edge.
            widgets.HBox([
                widgets.VBox([self.steps, self.hold, self.micro_batch_size,
                              self.effective_batch_size]),
                widgets.VBox([self.learning_rate, self.optimizer, self.epochs, self.preset,
                              self.tail, self.trainer, self.warmup]),
            ], layout=widgets.Layout(flex_flow="row wrap")),
            self.plan,
            widgets.HBox([self.run_button, self.stop_button, self.progress, self.x_axis]),
            self.status, self.image, self.summary,
        ])


def _notify(listeners):
    for listener in listeners:
        listener()
