"""Lesson 12's exercise check: passes the solution, says "not attempted" for the stub, and
names the fault of each realistic broken callback."""

import importlib
import pathlib
import sys

from gaviz.course import lesson12

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

solution = importlib.import_module("solutions.12_callback")


def stub(trainer, threshold):
    # your code here
    return None


def at_or_below(trainer, threshold):
    records = []

    def on_update(update):
        records.append((update.update, update.loss))
        if update.loss <= threshold:  # the fault: 0.5 is not below 0.5
            trainer.stop_training = True

    on_update.records = records
    return on_update


def without_records(trainer, threshold):
    def on_update(update):
        if update.loss < threshold:
            trainer.stop_training = True

    return on_update


def losses_only(trainer, threshold):
    records = []

    def on_update(update):
        records.append(update.loss)  # the fault: no update numbers
        if update.loss < threshold:
            trainer.stop_training = True

    on_update.records = records
    return on_update


SHARED = []


def shared_list(trainer, threshold):
    def on_update(update):
        SHARED.append((update.update, update.loss))  # the fault: one list for every call
        if update.loss < threshold:
            trainer.stop_training = True

    on_update.records = SHARED
    return on_update


def never_stops(trainer, threshold):
    records = []

    def on_update(update):
        records.append((update.update, update.loss))
        if update.loss < threshold:
            return True  # the fault: returning does not stop fit

    on_update.records = records
    return on_update


def assigns(trainer, threshold):
    records = []

    def on_update(update):
        records.append((update.update, update.loss))
        trainer.stop_training = update.loss < threshold  # the fault: False again after

    on_update.records = records
    return on_update


def test_the_solution_passes():
    outcome = lesson12.early_stop.evaluate(solution.make_early_stop)
    assert outcome.status == "pass", outcome.message
    assert "the first with a loss below" in outcome.message


def test_the_stub_is_not_attempted():
    assert lesson12.early_stop.evaluate(stub).status == "not attempted"


def test_stopping_at_the_threshold_is_named():
    outcome = lesson12.early_stop.evaluate(at_or_below)
    assert outcome.status == "fail"
    assert "stopped the trainer after update 3, whose loss 0.5 is not below" in outcome.message
    assert "compare with <" in outcome.message


def test_a_callback_without_records_is_named():
    outcome = lesson12.early_stop.evaluate(without_records)
    assert outcome.status == "fail" and "no `records` attribute" in outcome.message


def test_records_without_update_numbers_are_named():
    outcome = lesson12.early_stop.evaluate(losses_only)
    assert outcome.status == "fail"
    assert "records should be [(1, 2.0), (2, 0.9), (3, 0.5), (4, 0.49)]" in outcome.message
    assert "they are [2.0, 0.9, 0.5, 0.49]" in outcome.message


def test_a_list_shared_between_calls_is_named():
    SHARED.clear()
    outcome = lesson12.early_stop.evaluate(shared_list)
    assert outcome.status == "fail"
    assert "make a new list in each make_early_stop call" in outcome.message


def test_a_callback_that_never_stops_is_named():
    outcome = lesson12.early_stop.evaluate(never_stops)
    assert outcome.status == "fail"
    assert "trainer.stop_training is still False" in outcome.message


def test_hints_do_not_give_the_answer_away():
    hints = " ".join(lesson12.early_stop.hints)
    assert "records.append((update.update, update.loss))" not in hints
    assert lesson12.early_stop.solution_file == "12_callback.py"


def _pictures(output):
    data = output.get("data", {})
    return ("image/png" in data) + data.get("text/html", "").count("<img")


def test_the_lesson_shows_each_widget_once_with_its_last_frame_for_a_saved_copy():
    """Run as a newcomer would: each widget's output carries one picture, its final state
    (the dashboard's plot and table, LivePlot's last frame) for a page without widgets;
    no second copy below it, and no widget repr as text."""
    from lesson_runner import LESSONS, run_lesson

    executed = []
    run_lesson(LESSONS / "12_appendix_live_dashboard.ipynb", executed=executed)
    outputs = [o for cell in executed[0].cells if cell.cell_type == "code" for o in cell.outputs]
    widgets = [o for o in outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == 3  # gaviz.dashboard(), the driven board, the LivePlot
    shown = [o for o in outputs if _pictures(o)]
    assert shown == widgets[1:] and all(_pictures(o) == 1 for o in shown)
    assert shown[0]["data"]["text/html"].count("<table>") == 1
    for output in outputs:
        text = output.get("text", "") + output.get("data", {}).get("text/plain", "")
        assert "VBox(" not in text and "Image(value=" not in text, text
    # Rendered to HTML without JavaScript (nbconvert, nbviewer), the saved copy shows those
    # pictures, not the widgets' empty placeholders (issue #41): it keeps no widget state.
    import nbconvert

    assert "widgets" not in executed[0].metadata
    page, _ = nbconvert.HTMLExporter().from_notebook_node(executed[0])
    assert 'class="jupyter-widgets' not in page and page.count("data:image/png") >= len(shown)


def test_a_stop_set_back_to_false_is_named():
    """One graph call of several windows reports each update after it: an update above the
    threshold may follow the one that stopped."""
    outcome = lesson12.early_stop.evaluate(assigns)
    assert outcome.status == "fail" and "went back to False" in outcome.message, outcome
