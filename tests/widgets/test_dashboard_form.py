"""The dashboard's form alone: its controls, layout and events, with no Dashboard
and no training; and the checks the Dashboard makes before building it."""

import pytest

import gaviz
from gaviz import demo
from gaviz.training.window import tail
from gaviz.widgets import runs
from gaviz.widgets.dashboard_form import DashboardForm


def heard(form, event):
    """A list that grows by one entry each time ``form`` fires ``event``."""
    calls = []
    getattr(form, event).append(lambda: calls.append(event))
    return calls


def test_a_changed_setting_is_an_event_of_the_form_alone():
    form = DashboardForm()
    calls = heard(form, "on_settings_change")
    form.steps.value = (1, 8)
    form.tail.value = "drop"
    assert calls == ["on_settings_change"] * 2


def test_the_x_axis_is_a_setting_and_its_own_event():
    form = DashboardForm()
    settings, axis = heard(form, "on_settings_change"), heard(form, "on_x_axis_change")
    form.x_axis.value = "updates"
    assert settings == ["on_settings_change"] and axis == ["on_x_axis_change"]


def test_the_buttons_are_events():
    form = DashboardForm()
    run, stop = heard(form, "on_run"), heard(form, "on_stop")
    form.run_button.click()
    form.stop_button.click()
    form.stop_button.click()
    assert run == ["on_run"] and stop == ["on_stop"] * 2


def test_the_form_starts_from_the_values_it_is_given():
    form = DashboardForm(steps=(2, 4), hold="micro", tail="carry", trainer="missing_reset",
                         x_axis="seconds", warmup=True)
    assert form.steps.value == (2, 4) and form.hold.value == "micro"
    assert form.tail.value == "carry" and form.trainer.value == "missing_reset"
    assert form.x_axis.value == "seconds" and form.warmup.value


def test_the_choices_are_read_from_where_they_are_defined():
    form = DashboardForm()
    assert form.tail.options == tail.POLICIES
    assert form.trainer.options == runs.DEMO_TRAINERS
    assert form.optimizer.options == tuple(sorted(demo.OPTIMIZERS))
    assert form.preset.options == tuple(demo.PRESETS)


def test_running_disables_the_settings_and_run_and_enables_stop():
    form = DashboardForm()
    assert form.stop_button.disabled and not form.run_button.disabled
    form.set_running(True)
    assert all(control.disabled for control in form.settings)
    assert form.run_button.disabled and not form.stop_button.disabled
    form.set_running(False)
    derived = form.micro_batch_size  # holding the effective batch decides it
    assert derived.disabled and form.stop_button.disabled
    assert not any(control.disabled for control in form.settings if control is not derived)


def test_the_batch_size_the_held_one_decides_is_disabled():
    form = DashboardForm(hold="effective")
    assert form.micro_batch_size.disabled and not form.effective_batch_size.disabled
    form.hold.value = "micro"
    assert form.effective_batch_size.disabled and not form.micro_batch_size.disabled
    form.set_running(True)
    form.set_running(False)
    assert form.effective_batch_size.disabled and not form.micro_batch_size.disabled


def test_every_trainer_offered_trains_with_every_demo_optimizer():
    offered = DashboardForm().trainer.options
    assert offered[0] == "exact" and len(offered) > 5
    assert "per_micro_batch_clipping" not in offered and "schedule_per_micro_step" not in offered
    for name in offered[1:]:
        for optimizer in demo.OPTIMIZERS:
            gaviz.PITFALLS[name](demo.make_model(seed=0, hidden=4),
                                 demo.make_optimizer(optimizer, 0.01), "mse", 2)
    with pytest.raises(ValueError, match=r"`trainer` must be one of .* Received: "
                                         r"trainer='schedule_per_micro_step'"):
        gaviz.Dashboard(trainer="schedule_per_micro_step")


def test_the_plot_is_hidden_until_there_is_one_to_show():
    form = DashboardForm()
    assert form.image.layout.display == "none" and form.image.value == b""
    form.show_plot(b"\x89PNG")
    assert form.image.layout.display is None and form.image.value == b"\x89PNG"


def test_the_layout_holds_every_control_and_output_once():
    form = DashboardForm()

    def leaves(box):
        children = getattr(box, "children", None)
        return [w for child in children for w in leaves(child)] if children else [box]

    shown = leaves(form.widget)
    expected = [*form.settings, form.run_button, form.stop_button, form.plan, form.status,
                form.progress, form.image, form.summary]
    assert sorted(map(id, shown)) == sorted(map(id, expected))
    assert "gaviz-run" in form.run_button._dom_classes and "gaviz-plot" in form.image._dom_classes


def test_the_dashboard_shares_the_forms_widgets_and_listens_to_it():
    board = gaviz.dashboard(steps=(1, 4), effective_batch_size=128)
    assert board.steps is board.form.steps and board.widget is board.form.widget
    board.form.micro_batch_size.value = 16
    board.form.hold.value = "micro"
    assert "k=4, micro 16, effective 64" in board.plan.value


@pytest.mark.parametrize("setting, value", [
    ("tail", "flsh"), ("hold", "batch"), ("optimizer", "lamb"), ("preset", "mnist"),
    ("trainer", "missing"), ("x_axis", "epochs"), ("steps", (1, 3))])
def test_a_setting_no_control_offers_is_named(setting, value):
    received = value[-1] if setting == "steps" else value
    with pytest.raises(ValueError, match=rf"`{setting}` must be one of .* Received: "
                                         rf"{setting}={received!r}"):
        gaviz.Dashboard(**{setting: value})
