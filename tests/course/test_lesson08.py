"""Lesson 08's exercise checker passes the solution, says "not attempted" for the
lesson's stub, and names the fault of realistic wrong windows: not a graph, one
micro-batch per call, `next` past the end of the data, variables made on every
call, and (named by diagnose) a partial window dropped or accumulators never reset."""

import importlib
import pathlib
import sys

import tensorflow as tf

import gaviz
from gaviz.course import lesson08, make_accumulators, penalty_gradients

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))
solution = importlib.import_module("solutions.08_graph_trainer")
accumulator_solution = importlib.import_module("solutions.08_accumulator_epoch")

EXERCISE = lesson08.window


LESSON_K = 4  # the notebook's K


def window_maker(graph=True, loop=True, read="optional", flush="any", reset=True,
                 steps="argument", means=False):
    """make_window as a learner might write it: the solution, or it with one change."""

    def make_window(model, optimizer, loss, element_spec):
        variables = model.trainable_variables
        accumulators = make_accumulators(variables)
        sample_count = tf.Variable(0.0, trainable=False)
        optimizer.build(variables)

        def micro_step(x, y):
            with tf.GradientTape() as tape:
                summed = tf.reduce_sum(loss.call(y, model(x, training=True)))
                if means:  # PITFALL (when chosen): each micro-batch's mean, counted as one
                    summed = loss(y, model(x, training=True))
            for accumulator, gradient in zip(accumulators, tape.gradient(summed, variables)):
                accumulator.assign_add(gradient)
            sample_count.assign_add(1.0 if means else tf.cast(tf.shape(x)[0], tf.float32))

        def update():
            penalty = penalty_gradients(model)
            optimizer.apply_gradients(zip([a / sample_count + p for a, p in
                                           zip(accumulators, penalty)], variables))
            if reset:
                for accumulator in accumulators:
                    accumulator.assign(tf.zeros_like(accumulator))
            sample_count.assign(0.0)

        def window(iterator, accumulation_steps):
            consumed = tf.constant(0)
            if steps == "lesson":
                accumulation_steps = LESSON_K  # PITFALL (when chosen): the notebook's k
            for _ in tf.range(accumulation_steps if loop else 1):
                if read == "next":
                    micro_step(*next(iterator))  # PITFALL (when chosen): raises at the end
                    consumed += 1
                else:
                    batch = iterator.get_next_as_optional()
                    tf.cond(batch.has_value(), lambda: micro_step(*batch.get_value()),
                            lambda: None)
                    consumed += tf.cast(batch.has_value(), tf.int32)
            due = {"any": consumed > 0, "full": consumed == accumulation_steps,
                   "always": tf.constant(True)}[flush]
            tf.cond(due, update, lambda: None)
            return consumed

        return tf.function(window) if graph else window

    return make_window


def test_the_solution_passes():
    outcome = EXERCISE.evaluate(solution.make_window)
    assert outcome.status == "pass", outcome.message
    assert "[4, 4, 1, 0]" in outcome.message and "traced 1 time," in outcome.message
    assert "exact on all of diagnose's probes" in outcome.message


def test_the_lessons_stub_is_not_attempted():
    def make_window(model, optimizer, loss, element_spec):
        ...  # your code here

    assert EXERCISE.evaluate(make_window).status == "not attempted"


def test_a_window_that_is_not_a_graph():
    outcome = EXERCISE.evaluate(window_maker(graph=False))
    assert outcome.status == "fail" and "plain Python function" in outcome.message


def test_one_micro_batch_per_call():
    outcome = EXERCISE.evaluate(window_maker(loop=False))
    assert outcome.status == "fail" and "one call read 1 micro-batch" in outcome.message


def test_next_past_the_end_of_the_data():
    outcome = EXERCISE.evaluate(window_maker(read="next"))
    assert outcome.status == "fail"
    assert "the iterator ran out inside your window" in outcome.message
    assert "get_next_as_optional" in outcome.message


def test_variables_made_on_every_call():
    def make_window(model, optimizer, loss, element_spec):
        @tf.function
        def window(iterator, accumulation_steps):
            sums = make_accumulators(model.trainable_variables)  # PITFALL: every call
            return tf.constant(0) + len(sums)
        return window

    outcome = EXERCISE.evaluate(make_window)
    assert outcome.status == "fail" and "creates tf.Variables on every call" in outcome.message


def test_a_dropped_partial_window_is_named():
    """The check's own data ends in a tail of one micro-batch (issue #49): named before
    diagnose, whose partial windows hold 2."""
    outcome = EXERCISE.evaluate(window_maker(flush="full"))
    assert outcome.status == "fail"
    assert "the last window read 1 micro-batch and was not applied" in outcome.message


def test_a_missing_reset_is_named_by_diagnose():
    outcome = EXERCISE.evaluate(window_maker(reset=False))
    assert outcome.status == "fail"
    assert "missing_reset: zero the accumulators after every update (lesson 04)" in outcome.message


def test_a_window_reading_the_lessons_k_is_tried_at_another():
    """Issue #60: it passed, the check and its diagnose using only the notebook's k = 4."""
    outcome = EXERCISE.evaluate(window_maker(steps="lesson"))
    assert outcome.status == "fail", outcome
    assert "accumulation_steps=3" in outcome.message and "the notebook's K" in outcome.message


def test_an_update_from_nothing_read_is_named():
    """Issue #60: 0 / 0 turned the weights NaN, a NaN difference passed the first comparison,
    and diagnose's "no pitfall has this signature" refused it without naming it."""
    outcome = EXERCISE.evaluate(window_maker(flush="always"))
    assert outcome.status == "fail", outcome
    assert "read nothing" in outcome.message and "0 / 0" in outcome.message
    assert "no pitfall" not in outcome.message


def test_diagnoses_subject_is_the_learners_make_window():
    """Issue #60: diagnose's summary, which the check shows when its own data finds nothing,
    named windowed_epoch.<locals>.train_epoch."""
    from gaviz.course.graph import expected_retracing, windowed_epoch

    with expected_retracing():
        summary = gaviz.diagnose(windowed_epoch(window_maker(means=True))).summary()
    assert "<locals>" not in summary
    assert summary.startswith("the windows of your make_window against the exact trainer")


def test_micro_batch_means_counted_once_show_at_the_second_k():
    """At k = 3 the check's last window is ragged (8, 8 and 3 rows): the mean of means shows in
    its weights, before diagnose."""
    outcome = EXERCISE.evaluate(window_maker(means=True))
    assert outcome.status == "fail", outcome
    assert "at accumulation_steps=3" in outcome.message and "mean_of_means" in outcome.message


def test_hints_do_not_give_the_answer_away():
    assert len(EXERCISE.hints) >= 3
    whole = "\n".join(EXERCISE.hints)
    assert "apply_gradients" not in whole and "def window" not in whole


def test_the_wrong_windows_differ_from_a_passing_one_by_their_one_change():
    assert EXERCISE.evaluate(window_maker()).status == "pass"


def test_the_solution_equals_model_fit_on_the_big_batch():
    """Independent of the checker: Keras's own fit on batches of k x 32, with Adam, a ragged
    last micro-batch and a partial last window; one graph trace for the whole epoch."""
    import keras

    import gaviz
    from gaviz.course import max_difference
    from gaviz.course.graph import run_windows

    x, y = gaviz.demo.make_data(32 * 4 * 3 + 40, seed=2)  # 3 full windows, then 32 + 8 samples
    micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = gaviz.demo.make_model(seed=2)
    window = solution.make_window(model, keras.optimizers.Adam(0.01),
                                  keras.losses.MeanSquaredError(), micro_batches.element_spec)
    assert run_windows(window, micro_batches, 4) == 4
    assert window.experimental_get_tracing_count() == 1
    reference = gaviz.demo.make_model(seed=2)
    reference.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    reference.fit(x, y, batch_size=128, epochs=1, shuffle=False, verbose=0)
    assert max_difference(model, reference) < 1e-6
    assert max_difference(model, gaviz.demo.make_model(seed=2)) > 1e-3  # it trained


def test_run_windows_stops_a_window_that_always_says_full():
    from gaviz.course.graph import run_windows

    micro_batches = tf.data.Dataset.range(10).batch(2)  # 5 micro-batches

    @tf.function
    def always_full(iterator, accumulation_steps):
        return accumulation_steps  # PITFALL: never says the data ran out

    try:
        run_windows(always_full, micro_batches, 2)
    except RuntimeError as error:
        assert "past the end of the data" in str(error)
    else:
        raise AssertionError("run_windows should stop a window that never comes back short")


def test_the_accumulator_gives_the_graph_loops_weights_on_the_lessons_micro_batches():
    """The lesson's last section: gaviz.Accumulator's step in a tf.function, then flush, lands
    on the learner's window (here the solution's) from the same weights: 8 windows applied by
    step, the 33rd micro-batch (10 rows) by flush."""
    import keras

    import gaviz
    from gaviz.course import max_difference
    from gaviz.course.graph import run_windows

    x, y = gaviz.demo.make_data(1034, seed=0)
    micro_batches = gaviz.demo.make_dataset(x, y, 32)
    loss = keras.losses.MeanSquaredError()
    model, optimizer = gaviz.demo.make_model(seed=0), keras.optimizers.SGD(0.1)
    accumulator = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps=4)

    @tf.function(input_signature=micro_batches.element_spec)
    def accumulate(x, y):
        with tf.GradientTape() as tape:
            mean_loss = loss(y, model(x, training=True))
        gradients = tape.gradient(mean_loss, model.trainable_variables)
        return accumulator.step(gradients, count=tf.shape(x)[0])

    applied = [bool(accumulate(x_micro, y_micro)) for x_micro, y_micro in micro_batches]
    assert sum(applied) == 8 and int(accumulator.micro_steps_in_window) == 1
    assert bool(accumulator.flush()) and int(optimizer.iterations) == 9
    assert accumulate.experimental_get_tracing_count() == 1

    window_model, window_optimizer = gaviz.demo.make_model(seed=0), keras.optimizers.SGD(0.1)
    window = solution.make_window(window_model, window_optimizer, loss, micro_batches.element_spec)
    assert run_windows(window, micro_batches, 4) == 9 and int(window_optimizer.iterations) == 9
    assert max_difference(model, window_model) < 1e-5
    assert max_difference(model, gaviz.demo.make_model(seed=0)) > 1e-2  # it trained


# ------------------------------------------------------------- the loop on gaviz.Accumulator


def accumulator_loop(count="rows", summed=False, flush=True, apply_each=False, penalty=None,
                     flush_each=False, steps="argument"):
    """accumulator_epoch as a learner might write it: the solution, or it with one change."""

    def accumulator_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
        if steps == "lesson":
            accumulation_steps = LESSON_K  # PITFALL (when chosen): the notebook's k
        accumulator = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps)

        @tf.function
        def micro_step(x, y):
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                value = tf.reduce_sum(loss.call(y, y_pred)) if summed else loss(y, y_pred)
                if penalty is not None and model.losses:
                    value += tf.add_n(model.losses) * penalty
            gradients = tape.gradient(value, model.trainable_variables)
            if apply_each:
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            else:
                accumulator.step(gradients, count={"rows": tf.shape(x)[0], "one": 1.0}[count])

        for x, y in micro_batches:
            micro_step(x, y)
            if flush_each:
                accumulator.flush()  # PITFALL (when chosen): every micro-batch alone
        if flush:
            accumulator.flush()

    return accumulator_epoch


def test_the_accumulator_solution_passes():
    outcome = lesson08.accumulator.evaluate(accumulator_solution.accumulator_epoch)
    assert outcome.status == "pass", outcome.message
    assert "3 updates for 9 micro-batches" in outcome.message
    assert "ignores model.losses" not in outcome.message


def test_the_accumulator_stub_is_not_attempted():
    def accumulator_epoch(model, optimizer, loss, micro_batches, accumulation_steps):
        ...  # your code here

    assert lesson08.accumulator.evaluate(accumulator_epoch).status == "not attempted"


def test_a_loop_without_the_penalty_is_refused():
    """Issue #49: it passed, with a note that it ignores model.losses; the lesson asks for them."""
    outcome = lesson08.accumulator.evaluate(accumulator_loop())
    assert outcome.status == "fail" and "ignores the model's regularization losses" in \
        outcome.message and "model.losses" in outcome.message


def test_a_count_of_one_is_the_mean_of_means():
    outcome = lesson08.accumulator.evaluate(accumulator_loop(count="one"))
    assert outcome.status == "fail" and "mean_of_means" in outcome.message
    assert "this micro-batch's rows" in outcome.message


def test_the_summed_loss_is_counted_twice():
    outcome = lesson08.accumulator.evaluate(accumulator_loop(summed=True))
    assert outcome.status == "fail" and "8.00x the exact one" in outcome.message
    assert "*mean* loss" in outcome.message


def test_no_flush_drops_the_partial_window():
    outcome = lesson08.accumulator.evaluate(accumulator_loop(flush=False))
    assert outcome.status == "fail" and "Call accumulator.flush()" in outcome.message


def test_applying_every_micro_batch_is_named():
    outcome = lesson08.accumulator.evaluate(accumulator_loop(apply_each=True))
    assert outcome.status == "fail" and "9 updates, one per micro-batch" in outcome.message


def test_a_penalty_divided_by_k_is_named_without_a_rounding_gap():
    """Issue #60: it opened with "weights differ by 6.0e-08" (rounding) and called the penalty's
    finding "unexplained"."""
    outcome = lesson08.accumulator.evaluate(accumulator_loop(penalty=0.25))
    assert outcome.status == "fail", outcome
    assert "0.25 times per update" in outcome.message and "do not divide it by k" in \
        outcome.message
    assert "differ" not in outcome.message and "unexplained" not in outcome.message


def test_a_flush_after_every_micro_batch_is_named():
    """Issue #60: it was told to use step, not apply_gradients, which it did."""
    outcome = lesson08.accumulator.evaluate(accumulator_loop(penalty=1.0, flush_each=True))
    assert outcome.status == "fail", outcome
    assert "flush() was called 10 times" in outcome.message
    assert "apply_gradients" not in outcome.message


def test_an_accumulator_made_with_the_lessons_k_is_tried_at_another():
    outcome = lesson08.accumulator.evaluate(accumulator_loop(penalty=1.0, steps="lesson"))
    assert outcome.status == "fail", outcome
    assert "accumulation_steps=3" in outcome.message and "the notebook's K" in outcome.message
