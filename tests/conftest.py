import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# As the lessons start: TensorFlow loaded with its start-up log filtered, before any
# test module imports it (the README's examples, run here too, begin so).
import gaviz.quiet  # noqa: E402,F401

# The second numeric configuration (tests/training/test_other_kernels.py): with
# TF_ENABLE_ONEDNN_OPTS=0 too, TensorFlow's own kernels on one thread sum in
# another order than oneDNN's on many, as another CPU's would.
if os.environ.get("GAVIZ_TEST_ONE_THREAD"):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

# isort: split
import numpy as np
import pytest


@pytest.fixture
def regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(100, 1))).astype("float32")
    return x, y


#: The end-to-end tests, by path or node id: a newcomer's whole journeys (every
#: lesson run in JupyterLab and solved, the wheel installed into a new
#: environment, a first run's terminal, every benchmark script, the docs site, the
#: guide's examples and the command line run as printed, Binder's resolver), and
#: whole programs: tf.distribute on logical devices and worker processes (lesson
#: 10's two replicas too), KerasHub tasks with their tokenizers, saved notebooks,
#: the course's exercises solved whole, a fresh interpreter's import.
#: `make test-e2e` runs them (-m e2e) after `make test` (-m "not e2e"), which
#: holds the unit, exactness and convention tests and stays under ten minutes.
E2E = (
    "tests/browser/",
    "tests/course/test_solved_lessons.py",
    "tests/test_wheel.py",
    "tests/test_first_run.py",
    "tests/course/test_lessons.py::test_lesson_runs_top_to_bottom",
    "tests/test_benchmarks.py::test_every_benchmark_runs_and_reports",
    "tests/test_benchmarks.py::test_accumulation_holds_one_micro_batch_of_activations_at_a_time",
    "tests/test_benchmarks.py::test_the_gpu_run_",
    "tests/test_docs_examples.py::test_block_prints_what_the_page_shows",
    "tests/test_docs_examples.py::test_the_mixed_precision_block_runs_where_onednn_has_no_float16",
    "tests/widgets/test_compare.py::test_command_line_",
    "tests/test_packaging.py::test_binder_resolves_to_exactly_one_tensorflow",
    "tests/training/test_distributed.py",
    "tests/training/test_accumulator_edges.py::test_mirrored_",
    "tests/training/test_preprocessing.py",
    "tests/training/test_other_kernels.py",
    "tests/training/test_verification.py::test_under_mirrored_strategy_",
    "tests/training/test_verification.py::test_kerashub_tasks_",
    "tests/course/test_lesson10.py::test_on_two_replicas",
    "tests/course/test_lesson10.py::test_the_classic_distributed_loop",
    "tests/course/test_lesson12.py::test_the_lesson_shows_each_widget_once",
    "tests/widgets/test_widgets.py::test_a_saved_notebook_shows_the_finished_dashboard",
    # The course's exercises solved whole (the lessons' solutions through their checkers).
    "tests/course/test_lesson08.py::test_the_accumulator_solution_passes",
    "tests/course/test_lesson08.py::test_the_accumulator_gives_the_graph_loops_weights_on_",
    "tests/course/test_lesson09.py::test_your_model_solution_passes",
    "tests/course/test_lesson10.py::test_the_solution_passes_on_one_replica",
    "tests/course/test_lesson13.py::test_the_solution_gaviz_and_the_reference_agree_",
    "tests/course/test_solutions_08_11.py::test_your_model_is_model_fit_at_256_with_its_history",
    "tests/course/test_gpu.py::test_bytes_per_sample_grows_with_the_width",
    # A fresh interpreter's import.
    "tests/training/test_trainer.py::test_import_gaviz_loads_no_widgets_or_plotting",
)


def pytest_itemcollected(item):
    """Marks the end-to-end tests (E2E) ``e2e``, before -m selects."""
    if item.nodeid.startswith(E2E):
        item.add_marker(pytest.mark.e2e)


BROWSER_WALK = "test_lessons_open_clean_and_run_without_red"
NBCLIENT_RUN = "test_lesson_runs_top_to_bottom"


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they will
def pytest_collection_modifyitems(config, items):
    """Each lesson runs once per session: the browser walk runs every lesson and
    checks what test_lessons.py's nbclient runs check (nothing red, the kernel's
    peak under Binder's memory), so when it is selected those are skipped."""
    if not any(item.name == BROWSER_WALK for item in items):
        return
    skip = pytest.mark.skip(reason=f"run in JupyterLab by {BROWSER_WALK}")
    for item in items:
        if getattr(item, "originalname", None) == NBCLIENT_RUN:
            item.add_marker(skip)
