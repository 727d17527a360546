"""gaviz.diagnose names each defect of an accumulation loop, whoever wrote it.

The loops below are written the way people write them (lesson 03's loop, a
tf.function step, an Accelerate-style ``loss / k``, Keras's own
``gradient_accumulation_steps``); each carries its defect in a comment.
"""

import pathlib
import re
import textwrap
import time

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
import tensorflow as tf

import gaviz
from gaviz.gallery import diagnosis as diagnosis_module
from gaviz.gallery import probes, signatures
from gaviz.gallery.diagnosis import Diagnosis, SubjectError, diagnose

K = 4
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


# ------------------------------------------------------------------ helpers


def zeros(variables):
    return [tf.zeros(v.shape) for v in variables]


def penalty_gradients(model):
    """Gradients of the model's weight penalty (zeros for a model without one)."""
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        penalty = tf.add_n(model.losses) if model.losses else tf.constant(0.0)
    grads = tape.gradient(penalty, variables)
    return [tf.zeros(v.shape) if g is None else g for g, v in zip(grads, variables)]


def summed_loss_gradients(model, loss, x, y):
    """Gradients of a micro-batch's summed loss, and its sample count."""
    with tf.GradientTape() as tape:
        summed = tf.reduce_sum(loss.call(y, model(x, training=True)))
    return tape.gradient(summed, model.trainable_variables), len(x)


# ------------------------------------------------------------- eager loops


def exact_eager(model, optimizer, loss, micro_batches, accumulation_steps):
    """Lesson 03's loop, with the partial window flushed and the penalty added once."""
    variables = model.trainable_variables
    sums, count, steps = zeros(variables), 0, 0

    def update():
        grads = [s / count + p for s, p in zip(sums, penalty_gradients(model))]
        optimizer.apply_gradients(zip(grads, variables))

    for x, y in micro_batches:
        grads, n = summed_loss_gradients(model, loss, x, y)
        sums = [s + g for s, g in zip(sums, grads)]
        count, steps = count + n, steps + 1
        if steps == accumulation_steps:
            update()
            sums, count, steps = zeros(variables), 0, 0
    if steps:
        update()


def lesson_03_loop(model, optimizer, loss, micro_batches, accumulation_steps):
    """Lesson 03's ``train_accumulated``, as the learner first writes it."""
    variables = model.trainable_variables
    sums, count, steps = zeros(variables), 0, 0
    for x, y in micro_batches:
        grads, n = summed_loss_gradients(model, loss, x, y)
        sums = [s + g for s, g in zip(sums, grads)]
        count, steps = count + n, steps + 1
        if steps == accumulation_steps:
            optimizer.apply_gradients(zip([s / count for s in sums], variables))
            sums, count, steps = zeros(variables), 0, 0
    # DEFECT (dropped_tail): the partial window left in `sums` is never applied.


def missing_reset_eager(model, optimizer, loss, micro_batches, accumulation_steps):
    variables = model.trainable_variables
    sums, count, steps = zeros(variables), 0, 0
    for x, y in micro_batches:
        grads, n = summed_loss_gradients(model, loss, x, y)
        sums = [s + g for s, g in zip(sums, grads)]
        count, steps = count + n, steps + 1
        if steps == accumulation_steps:
            grads = [s / count + p for s, p in zip(sums, penalty_gradients(model))]
            optimizer.apply_gradients(zip(grads, variables))
            count, steps = 0, 0  # DEFECT (missing_reset): `sums` is not zeroed
    if steps:
        grads = [s / count + p for s, p in zip(sums, penalty_gradients(model))]
        optimizer.apply_gradients(zip(grads, variables))


def penalty_per_micro_batch(model, optimizer, loss, micro_batches, accumulation_steps):
    variables = model.trainable_variables
    sums, penalties, count, steps = zeros(variables), zeros(variables), 0, 0

    def update():
        optimizer.apply_gradients(zip([s / count + p for s, p in zip(sums, penalties)],
                                      variables))

    for x, y in micro_batches:
        grads, n = summed_loss_gradients(model, loss, x, y)
        sums = [s + g for s, g in zip(sums, grads)]
        # DEFECT (regularizer_every_micro_step): one penalty per micro-batch.
        penalties = [a + p for a, p in zip(penalties, penalty_gradients(model))]
        count, steps = count + n, steps + 1
        if steps == accumulation_steps:
            update()
            sums, penalties, count, steps = zeros(variables), zeros(variables), 0, 0
    if steps:
        update()


def article_loop(model, optimizer, loss, micro_batches, accumulation_steps):
    """The loop most articles print: each micro-batch's mean loss divided by k."""
    variables = model.trainable_variables
    sums = zeros(variables)
    for step, (x, y) in enumerate(micro_batches, start=1):
        with tf.GradientTape() as tape:
            # DEFECT (mean_of_means): a micro-batch's mean / k, whatever its size.
            scaled = (loss(y, model(x, training=True)) + tf.add_n(model.losses or [0.0])) / (
                accumulation_steps)
        sums = [s + g for s, g in zip(sums, tape.gradient(scaled, variables))]
        if step % accumulation_steps == 0:
            optimizer.apply_gradients(zip(sums, variables))
            sums = zeros(variables)
    # DEFECT (dropped_tail): the last partial window is forgotten.


def sum_of_means(model, optimizer, loss, micro_batches, accumulation_steps):
    variables = model.trainable_variables
    sums, steps = zeros(variables), 0

    def update():
        optimizer.apply_gradients(zip([s + p for s, p in zip(sums, penalty_gradients(model))],
                                      variables))

    for x, y in micro_batches:
        with tf.GradientTape() as tape:
            mean = loss(y, model(x, training=True))
        # DEFECT (missing_normalization): the means are added, never divided.
        sums = [s + g for s, g in zip(sums, tape.gradient(mean, variables))]
        steps += 1
        if steps == accumulation_steps:
            update()
            sums, steps = zeros(variables), 0
    if steps:
        update()


def never_applies(model, optimizer, loss, micro_batches, accumulation_steps):
    variables = model.trainable_variables
    sums, count = zeros(variables), 0
    for x, y in micro_batches:
        grads, n = summed_loss_gradients(model, loss, x, y)
        sums, count = [s + g for s, g in zip(sums, grads)], count + n
    # DEFECT: the new weights are computed, never assigned.
    new_weights = [v - optimizer.learning_rate * s / count for v, s in zip(variables, sums)]
    return new_weights


# ------------------------------------------------------- tf.function loops


def graph_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
    """The whole epoch in one tf.function; sums and counters in tf.Variables."""
    variables = model.trainable_variables
    optimizer.build(variables)
    sums = [tf.Variable(tf.zeros(v.shape), trainable=False) for v in variables]
    count = tf.Variable(0.0, trainable=False)
    steps = tf.Variable(0, trainable=False)

    def update():
        grads = [s / count + p for s, p in zip(sums, penalty_gradients(model))]
        optimizer.apply_gradients(zip(grads, variables))
        for s in sums:
            s.assign(tf.zeros_like(s))
        count.assign(0.0)
        steps.assign(0)

    @tf.function
    def epoch():
        for x, y in micro_batches:
            with tf.GradientTape() as tape:
                summed = tf.reduce_sum(loss.call(y, model(x, training=True)))
            for s, g in zip(sums, tape.gradient(summed, variables)):
                s.assign_add(g)
            count.assign_add(tf.cast(tf.shape(x)[0], tf.float32))
            steps.assign_add(1)
            if steps == accumulation_steps:
                update()
        if steps > 0:
            update()

    epoch()


def graph_step_loop(step_defect=None):
    """A tf.function per micro-batch, the update from Python: exact unless told."""

    def train_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
        variables = model.trainable_variables
        optimizer.build(variables)  # its variables must exist before tracing
        sums = [tf.Variable(tf.zeros(v.shape), trainable=False) for v in variables]

        @tf.function
        def micro_step(x, y):
            with tf.GradientTape() as tape:
                per_sample = loss.call(y, model(x, training=True))
                if step_defect == "divide by k":
                    # DEFECT (mean_of_means): each micro-batch's mean / k.
                    objective = tf.reduce_mean(per_sample) / accumulation_steps
                else:
                    objective = tf.reduce_sum(per_sample)
            grads = tape.gradient(objective, variables)
            if step_defect == "apply every micro-step":
                # DEFECT (update_every_micro_step): a step on each micro-batch, too.
                optimizer.apply_gradients(
                    zip([g / tf.cast(tf.shape(x)[0], g.dtype) for g in grads], variables))
            for s, g in zip(sums, grads):
                s.assign_add(g)

        def update(count):
            divisor = 1.0 if step_defect == "divide by k" else count
            # DEFECT with "divide by k" (under_scaled_tail): a partial window is
            # divided by k too, as Accelerate and Lightning do.
            grads = [s / divisor + p for s, p in zip(sums, penalty_gradients(model))]
            optimizer.apply_gradients(zip(grads, variables))
            for s in sums:
                s.assign(tf.zeros_like(s))

        count, steps = 0, 0
        for x, y in micro_batches:
            micro_step(x, y)
            count, steps = count + len(x), steps + 1
            if steps == accumulation_steps:
                update(count)
                count, steps = 0, 0
        if steps:
            update(count)

    train_epoch.__qualname__ = f"graph_step_loop({step_defect!r})"
    return train_epoch


def keras_builtin(model, optimizer, loss, micro_batches, accumulation_steps):
    """Keras's own accumulation through Model.fit, one epoch per call."""
    if not model.compiled:  # compile once: the optimizer keeps its window between epochs
        config = optimizer.get_config() | {"gradient_accumulation_steps": accumulation_steps}
        model.compile(optimizer=type(optimizer).from_config(config), loss=loss)
    model.fit(micro_batches, epochs=1, verbose=0, shuffle=False)


def keras_builtin_without_ema(model, optimizer, loss, micro_batches, accumulation_steps):
    """Keras's own accumulation, its optimizer made without a moving average."""
    if not model.compiled:
        config = optimizer.get_config() | {"gradient_accumulation_steps": accumulation_steps,
                                           "use_ema": False}
        model.compile(optimizer=type(optimizer).from_config(config), loss=loss)
    model.fit(micro_batches, epochs=1, verbose=0, shuffle=False)


# -------------------------------------------------------------------- tests


#: The number each gallery class shows with k = 4 (None: not a fixed number).
GALLERY_NUMBERS = {
    "missing_reset": probes.WINDOWS,  # window 1 counted 3 times
    "missing_normalization": K,  # every update 4x
    "dropped_tail": 0.0,  # the tail's weights never move
    "update_every_micro_step": K + 1,  # optimizer steps per window
    "zeroed_weights": 0.0,
    "mean_of_means": 3.0,  # a sample among 2 counts 6/2 times one among 6
    "per_micro_batch_clipping": 1 / np.sqrt(K),  # update length / clip
    "regularizer_every_micro_step": K,  # penalty per update
    "under_scaled_tail": probes.tail_length(K) / K,
    "carried_tail": None,  # how far the tail's weights move in epoch 2
    "ema_per_micro_step": K,  # the moving average's moves per update
}


@pytest.mark.parametrize("name", sorted(signatures.SIGNATURES))  # every pitfall a probe shows
def test_every_gallery_class_is_diagnosed_as_its_own_name(name):
    report = diagnose(gaviz.PITFALLS[name], accumulation_steps=K)
    assert report.findings == [name], report.summary()
    assert not report.exact and not report.unexplained
    (finding,) = report.details
    assert finding.name == name and finding.measured
    assert_reads_well(report.summary())
    # float32 rounding moves the numbers (up to ~5e-6 here), far inside the tolerance.
    if GALLERY_NUMBERS[name] is not None:
        assert abs(finding.value - GALLERY_NUMBERS[name]) < signatures.TOLERANCE / 100
    else:
        assert finding.value > 0.1


def test_the_exact_trainer_is_exact():
    report = diagnose(gaviz.AccumulationTrainer, accumulation_steps=K)
    assert report.exact and report.findings == [] and report.unused == []
    assert report.summary() == (
        "AccumulationTrainer against the exact trainer (accumulation_steps=4): "
        "exact on all 5 probes")
    for verdict in report.probes:
        np.testing.assert_array_equal(verdict.contributions, 1.0)  # the same code: no rounding


@pytest.mark.parametrize("loop", [exact_eager, graph_epoch, graph_step_loop()],
                         ids=["eager", "tf.function epoch", "tf.function step"])
def test_exact_hand_written_loops_are_exact(loop):
    report = diagnose(loop, accumulation_steps=K)
    assert report.exact, report.summary()
    # Rounding is far below the tolerance: no float32 difference counts as a defect.
    rounding = max(np.nanmax(np.abs(v.contributions - 1)) for v in report.probes)
    assert 0 <= rounding < signatures.TOLERANCE / 100


@pytest.mark.parametrize("loop, expected", [
    (lesson_03_loop, ["dropped_tail"]),
    (missing_reset_eager, ["missing_reset"]),
    (penalty_per_micro_batch, ["regularizer_every_micro_step"]),
    (sum_of_means, ["missing_normalization"]),
    (graph_step_loop("apply every micro-step"), ["update_every_micro_step"]),
], ids=["eager dropped tail", "eager missing reset", "eager penalty", "eager sum of means",
        "tf.function step every micro-step"])
def test_hand_written_loops_with_one_defect(loop, expected):
    report = diagnose(loop, accumulation_steps=K)
    assert report.findings == expected, report.summary()
    assert not report.unexplained


@pytest.mark.parametrize("loop, expected", [
    (article_loop, ["mean_of_means", "dropped_tail"]),
    (graph_step_loop("divide by k"), ["mean_of_means", "under_scaled_tail"]),
], ids=["eager article loop", "tf.function Accelerate-style"])
def test_two_defects_in_one_loop_are_both_reported(loop, expected):
    report = diagnose(loop, accumulation_steps=K)
    assert report.findings == expected, report.summary()
    lines = report.summary().splitlines()
    assert [line.split(":")[0] for line in lines[1:]] == [f"- {name}" for name in expected]


def test_keras_builtin_is_a_mean_of_means_with_a_carried_tail_and_an_ema_per_micro_step():
    report = diagnose(keras_builtin, accumulation_steps=K)
    assert report.findings == ["mean_of_means", "carried_tail", "ema_per_micro_step"], (
        report.summary())
    mean_of_means, carried, ema = report.details
    assert mean_of_means.value == pytest.approx(3.0, rel=1e-4)  # 6 / 2: sizes ignored
    assert carried.value > 0.1  # the tail moves its weights, but only in epoch 2
    assert ema.value == pytest.approx(K, rel=1e-4)  # the average moves on every micro-step
    # Keras steps its own optimizer, so steps per window are not counted; and it
    # clips the averaged gradient once.
    windows, _, _, clipping, averaged = report.probes
    assert "not counted" in windows.measured and clipping.verdict == "exact"
    # Keras divides each micro-batch's mean by k: equal micro-batches come out exact.
    assert np.max(np.abs(windows.contributions - 1)) < signatures.TOLERANCE / 100
    # Its average of window 2's weights moved (1 - 0.8^5) / (1 - 0.8^2) as far as the
    # exact one's (probes.py), windows 1 and 3's as far.
    shares = averaged.contributions.reshape(-1, K).mean(axis=1)
    np.testing.assert_allclose(shares, [1, (1 - 0.8 ** 5) / (1 - 0.8 ** 2), 1], rtol=1e-4)


def test_the_moving_average_is_not_judged_where_there_is_none():
    report = diagnose(keras_builtin_without_ema, accumulation_steps=K)
    assert report.findings == ["mean_of_means", "carried_tail"], report.summary()
    assert report.probes[-1].verdict == "moving average not used"
    assert report.unused == ["the optimizer's moving average (use_ema)"]
    assert report.summary().endswith(
        "- note: ignores the optimizer's moving average (use_ema); not counted against it.")


def test_a_gallery_trainer_is_run_only_on_the_probes_whose_optimizer_it_takes():
    report = diagnose(gaviz.PITFALLS["ema_per_micro_step"], accumulation_steps=K)
    assert [v.not_run for v in report.probes] == [signatures.Stop.REFUSED] * 4 + [None]
    assert report.probes[0].verdict == "not run: the subject needs use_ema=True"
    with pytest.raises(SubjectError, match=r"SchedulePerMicroStep refuses the optimizer of "
                       r"every probe of diagnose.*must have a learning-rate schedule"):
        diagnose(gaviz.PITFALLS["schedule_per_micro_step"], accumulation_steps=K)


def test_the_numbers_are_the_defects_own():
    reset = diagnose(missing_reset_eager, accumulation_steps=K).details[0]
    assert reset.value == pytest.approx(probes.WINDOWS, rel=1e-4)  # window 1 applied 3 times
    every = diagnose(graph_step_loop("apply every micro-step"), accumulation_steps=K).details[0]
    assert every.value == K + 1  # optimizer steps per window
    normalization = diagnose(sum_of_means, accumulation_steps=K).details[0]
    assert normalization.value == pytest.approx(K, rel=1e-4)
    assert "4.00x the exact one" in normalization.measured
    accelerate = diagnose(graph_step_loop("divide by k"), accumulation_steps=K).details[1]
    m = probes.tail_length(K)
    assert accelerate.value == pytest.approx(m / K, rel=1e-4)


@pytest.mark.parametrize("k", [2, 3])
def test_other_accumulation_steps(k):
    for loop, expected in [(exact_eager, []), (article_loop, ["mean_of_means", "dropped_tail"])]:
        assert diagnose(loop, accumulation_steps=k).findings == expected
    assert diagnose(gaviz.PITFALLS["missing_normalization"], k).details[0].value == (
        pytest.approx(k, rel=1e-4))


def test_a_loop_that_moves_no_weight_is_not_exact():
    report = diagnose(never_applies, accumulation_steps=K)
    assert not report.changes_weights and not report.exact and report.findings == []
    assert "does not change the weights" in report.summary()
    assert [v.verdict for v in report.probes[1:]] == ["not run: the subject does not change "
                                                      "the weights"] * 4


def assert_reads_well(text):
    """No doubled parentheses ("((", ") ("), and no ratio printed as "0.00x"."""
    for wrong in ("((", "))", ") (", "0.00x"):
        assert wrong not in text, f"{wrong!r} in:\n{text}"


def test_ignoring_the_penalty_is_noted_not_counted():
    report = diagnose(lesson_03_loop, accumulation_steps=K)
    assert report.unused == ["the model's regularization losses (model.losses)"]
    assert "- note: ignores the model's regularization losses" in report.summary()
    assert_reads_well(report.summary())
    assert_reads_well(report._repr_html_().split("<img")[0])


def test_a_tiny_ratio_is_said_in_words():
    assert signatures._times(0.001) == "less than 0.01x" and signatures._times(0.5) == "0.50x"
    assert signatures._moved(0.0) == "barely moved, less than 0.01x"


def test_summary_gives_number_and_fix_pointing_to_the_lesson():
    report = diagnose(graph_step_loop("divide by k"), accumulation_steps=K)
    header, *lines = report.summary().splitlines()
    assert header.endswith("(accumulation_steps=4): 2 defects")
    assert "counts 3.00x one in a micro-batch of 6" in lines[0]
    assert "lesson 05_pitfall_missing_normalization" in lines[0]
    assert "0.50x as far as the exact update" in lines[1]
    assert "lesson 06_pitfall_dropped_tail" in lines[1]
    for name, (fix, lesson) in diagnosis_module.FIXES.items():
        assert name in gaviz.PITFALLS and fix and lesson[:2].isdigit()
    assert set(diagnosis_module.FIXES) == set(gaviz.PITFALLS)


def test_notebook_display_has_the_probe_table_and_a_picture():
    report = diagnose(article_loop, accumulation_steps=K)
    page = report._repr_html_()
    assert page.count("<tr>") == 1 + 5 and "data:image/png;base64," in page
    assert "mean_of_means" in page and "dropped_tail" in page
    figure = report.plot()
    assert len(figure.axes) == 5
    ragged = figure.axes[1]
    heights = [bar.get_height() for bar in ragged.patches]
    np.testing.assert_allclose(heights, report.probes[1].contributions, rtol=1e-6)
    assert repr(report) == "<Diagnosis of article_loop: mean_of_means, dropped_tail>"


def test_diagnose_is_seeded():
    first = diagnose(article_loop, accumulation_steps=K)
    second = diagnose(article_loop, accumulation_steps=K)
    for a, b in zip(first.probes, second.probes):
        np.testing.assert_array_equal(a.contributions, b.contributions)


def test_an_eager_loop_is_diagnosed_in_under_ten_seconds():
    diagnosis_module._exact_runs.cache_clear()  # the exact trainer's runs included
    start = time.perf_counter()
    diagnose(exact_eager, accumulation_steps=K)
    assert time.perf_counter() - start < 10.0


# ---------------------------------------------------------------- bad input


def test_subject_must_be_a_function_or_a_trainer_class():
    with pytest.raises(TypeError, match=r"`subject` must be a function train_epoch\(model, "
                       r"optimizer, loss, micro_batches, accumulation_steps\).*Received: "
                       r"subject=42 of type int"):
        diagnose(42)

    class NoFit:
        def __init__(self, model, optimizer, loss, accumulation_steps):
            pass

    with pytest.raises(TypeError, match="Received: subject=NoFit, a class without fit"):
        diagnose(NoFit)
    with pytest.raises(TypeError, match="subject=ndarray"):
        diagnose(np.ndarray)  # a class, but not a trainer


def test_a_function_with_the_wrong_signature_is_refused_before_running():
    def train(model, optimizer):
        raise AssertionError("must not be called")

    with pytest.raises(TypeError, match=r"Received: subject=.*train\(model, optimizer\), which "
                       r"cannot be called with the 5 arguments"):
        diagnose(train)


def test_a_subject_that_raises_is_named_with_its_own_exception_chained():
    def broken(model, optimizer, loss, micro_batches, accumulation_steps):
        raise KeyError("no such layer")

    with pytest.raises(SubjectError, match=r"`subject` .*broken raised KeyError in diagnose's "
                       r"'windows' probe \(epoch 1\).*broken\(model, optimizer, loss, "
                       r"micro_batches, accumulation_steps\)") as caught:
        diagnose(broken)
    assert isinstance(caught.value.__cause__, KeyError)
    assert caught.value.probe == "windows" and caught.value.epoch == 1

    class FailingTrainer(gaviz.AccumulationTrainer):
        def fit(self, dataset, epochs=1, on_update=None):
            raise RuntimeError("out of memory")

    with pytest.raises(SubjectError, match=r"FailingTrainer\(model, optimizer, loss, "
                       r"accumulation_steps\)\.fit\(micro_batches, epochs=1\)") as caught:
        diagnose(FailingTrainer)
    assert str(caught.value.__cause__) == "out of memory"


@pytest.mark.parametrize("steps", [1, 0, 2.5, "4"])
def test_accumulation_steps_must_be_an_int_of_at_least_two(steps):
    with pytest.raises(ValueError, match=r"`accumulation_steps` must be an integer >= [12]"):
        diagnose(exact_eager, accumulation_steps=steps)


# ------------------------------------------------------------------ README


def test_readme_diagnoses_keras_builtin_as_printed(capsys):
    text = README.read_text()
    match = re.search(r"<!-- diagnose-example.*?-->\s*```python\n(.*?)```\s*```text\n(.*?)```",
                      text, re.S)
    assert match, "README lost its diagnose example"
    code, printed = match.groups()
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == printed.strip()


def test_report_class_is_exported():
    assert gaviz.diagnose is diagnose and gaviz.Diagnosis is Diagnosis


def test_the_docstring_example_loop_is_diagnosed_as_its_comment_says():
    doc = diagnose.__doc__
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    namespace = {"tf": tf}
    exec(compile(textwrap.dedent(block), "diagnose.__doc__", "exec"), namespace)
    assert len(block.strip().splitlines()) <= 12
    report = diagnose(namespace["train_epoch"], accumulation_steps=K)
    assert report.findings == ["dropped_tail"], report.summary()


# ---------------------------------------------------------- loops on gaviz.Accumulator


def accumulator_loop(count_of, flush=True):
    """An epoch of a GradientTape loop built on gaviz.Accumulator."""

    def train_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
        acc = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps)
        for x, y in micro_batches:
            with tf.GradientTape() as tape:
                value = loss(y, model(x, training=True))  # a mean over the rows
                if model.losses:
                    value += tf.add_n(model.losses)
            acc.step(tape.gradient(value, model.trainable_variables), count_of(x))
        if flush:
            acc.flush()

    return train_epoch


def test_a_loop_on_the_accumulator_is_exact():
    diagnosis = gaviz.diagnose(accumulator_loop(lambda x: tf.shape(x)[0]), accumulation_steps=3)
    assert diagnosis.exact, diagnosis.summary()


def test_a_wrong_count_on_the_accumulator_is_named_as_normalization():
    # count=1 where the loss divides by the rows: each micro-batch's mean
    # weighs the same whatever its size, the mean of means.
    diagnosis = gaviz.diagnose(accumulator_loop(lambda x: 1), accumulation_steps=3)
    assert diagnosis.findings == ["mean_of_means"], diagnosis.summary()


def test_an_accumulator_never_flushed_drops_the_tail():
    # A new accumulator each epoch: the unflushed partial window is lost.
    diagnosis = gaviz.diagnose(accumulator_loop(lambda x: tf.shape(x)[0], flush=False),
                               accumulation_steps=3)
    assert diagnosis.findings == ["dropped_tail"], diagnosis.summary()
