"""gaviz.Accumulator at its edges (issue #40): None gradients, counts under XLA,
non-finite windows, FlushAtEpochEnd's place among callbacks, losses that
couple a batch's items.

Each is compared with an independent big batch: a GradientTape over the
window's rows and one Keras optimizer step (which skips a variable whose
gradient is None), or Keras's own Model.fit. Nothing here uses gaviz's
arithmetic. Two replicas: ``python tests/training/test_accumulator_edges.py mirrored``
in a subprocess (logical devices must be set before TensorFlow starts).
"""

import json
import os
import pathlib
import subprocess
import sys
import warnings

if __name__ == "__main__":  # the two-replica run, in its own process
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/, for helpers
    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from helpers import (  # noqa: E402
    assert_same_recorded_weights,
    assert_same_weights,
    start_of,
    weights_record,
)

import gaviz  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
K = 3
WINDOW_ROWS = 12  # the largest window's rows (SIZES' first, 4 x 3 elsewhere): the terms


def data(rows, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(rows, 5)).astype("float32"),
            rng.normal(size=(rows, 1)).astype("float32"))


def squared_errors(y, p):
    return tf.reduce_mean(tf.square(y - p), axis=-1)  # one per row


# ------------------------------------------------------------------ None gradients


class Tasks:
    """A shared trunk, one head per task, and a layer no loss reaches: the
    variables a multi-task loop trains, in a fixed order."""

    def __init__(self, seed=1):
        keras.utils.set_random_seed(seed)
        self.trunk = keras.layers.Dense(6, activation="tanh", name="trunk")
        self.heads = {"a": keras.layers.Dense(1, name="head_a"),
                      "b": keras.layers.Dense(1, name="head_b")}
        self.unused = keras.layers.Dense(2, name="unused")
        self.trunk.build((None, 5))
        self.unused.build((None, 5))
        for head in self.heads.values():
            head.build((None, 6))
        self.variables = (self.trunk.trainable_variables + self.heads["a"].trainable_variables
                          + self.heads["b"].trainable_variables
                          + self.unused.trainable_variables)

    def summed_loss(self, task, x, y):
        return tf.reduce_sum(squared_errors(y, self.heads[task](self.trunk(x))))

    def values(self):
        return [v.numpy() for v in self.variables]


def micro_tasks(tasks, sizes, seed=0):
    x, y = data(sum(sizes), seed)
    starts = np.cumsum([0] + sizes)
    return [(t, x[s:s + n], y[s:s + n]) for t, s, n in zip(tasks, starts, sizes)]


def keras_big_batches(make_optimizer, micro, seed=1):
    """The reference: each window's rows as one batch, the loss a mean over
    them, one Keras step (a variable the window's loss does not reach gets
    None, which Keras skips)."""
    model, optimizer = Tasks(seed), make_optimizer()
    for start in range(0, len(micro), K):
        window = micro[start:start + K]
        rows = sum(len(x) for _, x, _ in window)
        with tf.GradientTape() as tape:
            loss = tf.add_n([model.summed_loss(t, x, y) for t, x, y in window]) / rows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras says it skips the None ones
            optimizer.apply_gradients(zip(tape.gradient(loss, model.variables), model.variables))
    return model.values()


def gap(values, expected):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(values, expected))


def gradients(model, task, x, y):
    with tf.GradientTape() as tape:
        loss = model.summed_loss(task, x, y) / tf.cast(tf.shape(x)[0], tf.float32)  # a mean
    return tape.gradient(loss, model.variables)


# Window 1 trains both heads, window 2 only head_a, the flushed window 3 only head_b.
TASKS = ["a", "b", "a", "a", "a", "a", "b"]
SIZES = [4, 3, 5, 2, 4, 4, 3]


def run_eagerly(make_optimizer, micro):
    """An eager loop that branches in Python per task."""
    model = Tasks()
    acc = gaviz.Accumulator(make_optimizer(), model.variables, accumulation_steps=K)
    for task, x, y in micro:
        acc.step(gradients(model, task, x, y), count=len(x))
    acc.flush()
    return model.values()


def run_in_graphs(make_optimizer, micro):
    """One tf.function per task adds; a tf.function traced after both applies."""
    model = Tasks()
    acc = gaviz.Accumulator(make_optimizer(), model.variables, accumulation_steps=K)
    spec = (tf.TensorSpec([None, 5]), tf.TensorSpec([None, 1]))
    add = {task: tf.function(lambda x, y, task=task: acc.add(gradients(model, task, x, y),
                                                             tf.shape(x)[0]),
                             input_signature=spec) for task in ("a", "b")}
    apply = tf.function(acc.apply)
    for i, (task, x, y) in enumerate(micro):
        add[task](x, y)
        if i % K == K - 1:
            apply()
    apply()  # the partial window
    return model.values()


OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(0.05),
    "adamw": lambda: keras.optimizers.AdamW(0.05, weight_decay=0.2),
    "sgd": lambda: keras.optimizers.SGD(0.1),
}


@pytest.mark.parametrize("run", [run_eagerly, run_in_graphs], ids=["eager", "tf_function"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_variable_without_gradient_in_a_window_is_not_updated(name, run):
    micro = micro_tasks(TASKS, SIZES)
    expected = keras_big_batches(OPTIMIZERS[name], micro)
    assert_same_weights(run(OPTIMIZERS[name], micro), expected, Tasks().values(),
                        terms=WINDOW_ROWS)


def test_a_layer_no_loss_reaches_is_not_decayed_in_a_graph():
    """The common case: a variable that never has a gradient is left out of
    every update, statically, also by ``step`` inside one tf.function."""
    micro = micro_tasks(["a"] * 7, SIZES)
    expected = keras_big_batches(OPTIMIZERS["adamw"], micro)
    model = Tasks()
    start = model.values()
    acc = gaviz.Accumulator(OPTIMIZERS["adamw"](), model.variables, accumulation_steps=K)
    step = tf.function(lambda x, y: acc.step(gradients(model, "a", x, y), tf.shape(x)[0]))
    for _, x, y in micro:
        step(x, y)
    acc.flush()
    assert_same_weights(model.values(), expected, start, terms=WINDOW_ROWS)
    unused = model.unused.kernel.numpy()
    assert np.array_equal(unused, Tasks().unused.kernel.numpy())  # not decayed


def test_a_step_traced_before_a_pattern_it_never_saw_refuses_the_window():
    """``step`` in one tf.function per task: the first was traced before the
    second task's head ever had a gradient, so it cannot update it exactly."""
    micro = micro_tasks(TASKS, SIZES)
    model = Tasks()
    optimizer = keras.optimizers.Adam(0.05)
    acc = gaviz.Accumulator(optimizer, model.variables, accumulation_steps=K)
    spec = (tf.TensorSpec([None, 5]), tf.TensorSpec([None, 1]))  # traced once each
    step = {task: tf.function(lambda x, y, task=task: acc.step(gradients(model, task, x, y),
                                                               tf.shape(x)[0]),
                              input_signature=spec)
            for task in ("a", "b")}
    before = model.values()
    step["a"](*micro[0][1:])
    step["b"](*micro[1][1:])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)which variables had a gradient.*head_b.*outside tf.function"):
        step["a"](*micro[2][1:])  # applies a window in which head_b had a gradient
    assert gap(model.values(), before) == 0
    assert int(optimizer.iterations.numpy()) == 0
    assert int(acc.micro_steps_in_window.numpy()) == 0  # discarded


def test_too_many_patterns_for_one_traced_update_are_refused_by_name():
    """Four micro-steps, each giving a gradient to another variable: 15 unions."""
    variables = [tf.Variable(np.ones(2, "float32"), name=f"w{i}") for i in range(4)]
    acc = gaviz.Accumulator(keras.optimizers.SGD(0.1), variables, accumulation_steps=4)
    for i in range(4):
        gradients = [tf.ones(2) if j == i else None for j in range(4)]
        tf.function(lambda g=gradients: acc.add(g, 2.0))()
    with pytest.raises(ValueError, match=r"`gradients` are None for different variables.*"
                                         r"w0.*w3.*15 sets.*outside tf.function"):
        tf.function(acc.apply)()
    assert bool(acc.apply())  # eagerly: the window's own pattern
    assert [float(v.numpy()[0]) for v in variables] == pytest.approx([0.975] * 4)


# ------------------------------------------------------------------- counts under XLA


def mlp(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(1)])


def xla_step(model, acc, poison=False):
    """``step`` compiled by XLA, where TensorFlow drops assertions."""

    @tf.function(jit_compile=True)
    def step(x, y, count, scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(squared_errors(y, model(x, training=True))) * scale
        return acc.step(tape.gradient(loss, model.trainable_variables), count)

    return step


@pytest.mark.parametrize("bad", [0.0, -4.0, float("nan")])
def test_a_window_with_a_bad_count_is_never_applied_under_xla(bad):
    model = mlp()
    optimizer = keras.optimizers.Adam(0.05)
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps=K)
    step = xla_step(model, acc)
    x, y = data(4)
    before = model.get_weights()
    said = [bool(step(x, y, tf.constant(c), tf.constant(1.0))) for c in (4.0, bad, 4.0)]
    assert said == [False, False, False]
    assert int(optimizer.iterations.numpy()) == 0
    assert gap(model.get_weights(), before) == 0
    assert int(acc.micro_steps_in_window.numpy()) == 0  # discarded
    with pytest.raises(ValueError, match=r"`count`.*1 window"):
        acc.flush()  # the next call outside XLA says so
    acc.flush()  # once
    for _ in range(K):  # and the accumulator goes on
        step(x, y, tf.constant(4.0), tf.constant(1.0))
    assert int(optimizer.iterations.numpy()) == 1


class RowCounted(keras.Model):
    """A train_step that accumulates, counting rows (or a bad count on demand)."""

    count_offset = 0.0

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        rows = tf.cast(tf.shape(x)[0], tf.float32)
        self.accumulator.step(tape.gradient(loss, self.trainable_variables),
                              count=rows + self.count_offset)
        for metric in self.metrics:
            if metric.name == "loss":  # Keras's loss tracker, weighed by rows
                metric.update_state(loss, sample_weight=rows)
        return self.compute_metrics(x, y, y_pred)


def row_counted(seed=1):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,))
    return RowCounted(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(
        inputs)))


def test_model_fit_with_jit_compile_hears_of_a_refused_count():
    model = row_counted()
    model.count_offset = -100.0  # every count negative
    model.compile(keras.optimizers.Adam(0.05), "mse", jit_compile=True)
    model.accumulator = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    x, y = data(24)
    before = model.get_weights()
    with pytest.raises(ValueError, match=r"`count`"):
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0,
                  callbacks=[gaviz.FlushAtEpochEnd(model.accumulator)])
    assert int(model.optimizer.iterations.numpy()) == 0
    assert gap(model.get_weights(), before) == 0


# ------------------------------------------------------------------ non-finite windows


def poisoned_run(mode):
    """Window 1 clean, window 2 with one non-finite micro-batch, window 3 clean;
    returns (model, optimizer, accumulator, step, batches)."""
    model = mlp()
    optimizer = keras.optimizers.Adam(0.05)
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps=K)

    def step(x, y, count, scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(squared_errors(y, model(x, training=True))) * scale
        return acc.step(tape.gradient(loss, model.trainable_variables), count)

    step = {"eager": step, "graph": tf.function(step),
            "xla": tf.function(step, jit_compile=True)}[mode]
    return model, optimizer, acc, step


def clean_reference(micro_batches):
    """Keras on the big batches of the clean windows only (window 2 skipped)."""
    model = mlp()
    optimizer = keras.optimizers.Adam(0.05)
    for window in (micro_batches[:K], micro_batches[2 * K:]):
        x = np.concatenate([b[0] for b in window])
        y = np.concatenate([b[1] for b in window])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(squared_errors(y, model(x, training=True)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
    return model


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_a_non_finite_window_is_discarded_and_said(mode):
    model, optimizer, acc, step = poisoned_run(mode)
    start = start_of(model)
    x, y = data(36, seed=2)
    batches = [(x[i:i + 4], y[i:i + 4]) for i in range(0, 36, 4)]
    raised = {"eager": gaviz.NonFiniteUpdate, "graph": tf.errors.InvalidArgumentError}
    for i, (xb, yb) in enumerate(batches):
        scale = tf.constant(np.inf if i == K + 1 else 1.0)
        if i == 2 * K - 1 and mode in raised:
            before = model.get_weights()
            with pytest.raises(raised[mode], match=r"not finite.*not applied"):
                step(xb, yb, tf.constant(4.0), scale)
            assert gap(model.get_weights(), before) == 0
            assert int(optimizer.iterations.numpy()) == 1
            assert int(acc.micro_steps_in_window.numpy()) == 0
        else:
            step(xb, yb, tf.constant(4.0), scale)
    if mode == "xla":  # said at the next call outside XLA
        with pytest.raises(gaviz.NonFiniteUpdate, match=r"1 window.*XLA.*not finite"):
            acc.flush()
    assert int(optimizer.iterations.numpy()) == 2
    assert_same_weights(model, clean_reference(batches), start, terms=WINDOW_ROWS)


# ------------------------------------------------------- FlushAtEpochEnd among callbacks


def keras_reference_fit(x, y, batch_size, epochs, callbacks, **fit):
    big = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                            keras.layers.Dense(1)])
    big.set_weights(row_counted().get_weights())
    big.compile(keras.optimizers.Adam(0.05), "mse")
    big.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0,
            callbacks=callbacks, **fit)
    return big


def saved(path, like):
    model = keras.models.clone_model(like)
    model.load_weights(path)
    return model.get_weights()


def watchers(folder):
    """EarlyStopping that keeps and restores the best weights, and a
    checkpoint of every epoch: both read the weights at on_epoch_end."""
    stopping = keras.callbacks.EarlyStopping(monitor="loss", patience=10,
                                             restore_best_weights=True)
    checkpoint = keras.callbacks.ModelCheckpoint(str(folder / "e{epoch}.weights.h5"),
                                                 save_weights_only=True)
    return [stopping, checkpoint]


FEEDS = {
    "arrays": lambda x, y: ((x, y), dict(batch_size=4)),
    "dataset": lambda x, y: ((tf.data.Dataset.from_tensor_slices((x, y)).batch(4),), {}),
    "steps_per_epoch": lambda x, y: ((tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
                                      .repeat(),), dict(steps_per_epoch=11)),
}


# Not steps_per_epoch=11 with steps_per_execution=3: Keras 3.15.1 then runs
# 12 steps an epoch of a repeated dataset, not the 11 of the reference.
@pytest.mark.parametrize("feed, steps_per_execution", [
    ("arrays", 1), ("arrays", 3), ("dataset", 1), ("dataset", 3), ("steps_per_epoch", 1)])
def test_flush_at_epoch_end_listed_last_still_precedes_what_reads_weights(
        tmp_path, feed, steps_per_execution):
    x, y = data(44)  # 11 micro-batches of 4: 3 windows and a partial one of 2
    model = row_counted()
    start = start_of(model)
    model.compile(keras.optimizers.Adam(0.05), "mse", steps_per_execution=steps_per_execution)
    model.accumulator = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    (args, fit) = FEEDS[feed](x, y)
    mine = watchers(tmp_path / "mine")
    model.fit(*args, epochs=3, shuffle=False, verbose=0,
              callbacks=mine + [gaviz.FlushAtEpochEnd(model.accumulator)], **fit)
    theirs = watchers(tmp_path / "theirs")
    big = keras_reference_fit(x, y, 4 * K, 3, theirs)
    assert mine[0].best_epoch == theirs[0].best_epoch == 2
    assert_same_weights(model, big, start, terms=4 * K)  # as restored by EarlyStopping
    for epoch in (1, 2, 3):
        assert_same_weights(saved(tmp_path / "mine" / f"e{epoch}.weights.h5", model),
                            saved(tmp_path / "theirs" / f"e{epoch}.weights.h5", big),
                            start, terms=4 * K)


UNKNOWN_LENGTH = pytest.mark.filterwarnings("ignore:Your input ran out of data")  # Keras's, epoch 1


@UNKNOWN_LENGTH
def test_flush_at_epoch_end_learns_an_unknown_length_from_the_first_epoch(tmp_path):
    """A dataset of unknown cardinality: Keras's params say no steps. The
    first epoch's window is applied at on_epoch_end (in list order); later
    epochs' at their last batch, learned from the first."""
    x, y = data(44)
    model = row_counted()
    start = start_of(model)
    model.compile(keras.optimizers.Adam(0.05), "mse")
    model.accumulator = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    unknown = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).filter(lambda a, b: True)
    mine = watchers(tmp_path / "mine")
    model.fit(unknown, epochs=3, shuffle=False, verbose=0,
              callbacks=mine + [gaviz.FlushAtEpochEnd(model.accumulator)])
    theirs = watchers(tmp_path / "theirs")
    big = keras_reference_fit(x, y, 4 * K, 3, theirs)
    epochs = [(saved(tmp_path / "mine" / f"e{epoch}.weights.h5", model),
               saved(tmp_path / "theirs" / f"e{epoch}.weights.h5", big)) for epoch in (1, 2, 3)]
    assert gap(*epochs[0]) > 1e-3  # the first epoch, before its partial window (documented)
    for mine, theirs in epochs[1:]:
        assert_same_weights(mine, theirs, start, terms=4 * K)


@UNKNOWN_LENGTH
def test_flush_at_epoch_end_refuses_an_epoch_longer_than_the_one_it_learned():
    x, y = data(44)
    model = row_counted()
    model.compile(keras.optimizers.Adam(0.05), "mse")
    model.accumulator = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    lengths = iter([40, 44])

    def rows():
        n = next(lengths)
        for i in range(0, n, 4):
            yield x[i:i + 4], y[i:i + 4]

    spec = (tf.TensorSpec([None, 5]), tf.TensorSpec([None, 1]))
    growing = tf.data.Dataset.from_generator(rows, output_signature=spec)
    with pytest.raises(ValueError, match=r"more batches than.*steps_per_epoch"):
        model.fit(growing, epochs=2, shuffle=False, verbose=0,
                  callbacks=[gaviz.FlushAtEpochEnd(model.accumulator)])


# ------------------------------------------------------ losses that couple a batch's items


def test_the_own_loop_guide_says_what_a_coupled_loss_gets():
    guide = (HERE.parents[1] / "docs" / "guide" / "own_loop.md").read_text()
    section = guide.split("## Losses that couple a batch's items")[1].split("\n## ")[0]
    section = " ".join(section.split())
    for words in ("in-batch negatives", "batch statistics", "your_training.md"):
        assert words in section, words


# ----------------------------------------------------------------------- two replicas


@pytest.fixture(scope="module")
def mirrored():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, __file__, "mirrored"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(text for text in done.stdout.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_mirrored_leaves_out_a_variable_without_gradient(mirrored):
    # Each replica sees a micro-batch's 8 rows: a window sums 2 x 8 x K terms.
    assert_same_recorded_weights(mirrored["none"], terms=2 * 8 * K)


def test_mirrored_chooses_among_the_patterns_of_two_tasks(mirrored):
    assert_same_recorded_weights(mirrored["tasks"], terms=2 * 8 * K)


def test_mirrored_discards_a_non_finite_window(mirrored):
    case = mirrored["non_finite"]
    assert "not finite" in case["error"] and case["moved"] == 0 and case["updates"] == 0


def test_mirrored_discards_a_window_whose_replicas_counted_nothing(mirrored):
    case = mirrored["zero_total"]
    assert "`count`" in case["error"] and case["moved"] == 0 and case["updates"] == 0


def mirrored_main():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    result = {}
    micro = micro_tasks(["a"] * 6, [8] * 6)
    expected = keras_big_batches(OPTIMIZERS["adamw"], micro)
    with strategy.scope():
        model = Tasks()
        acc = gaviz.Accumulator(OPTIMIZERS["adamw"](), model.variables, K)

    def replica_step(x, y, scale, count_scale):
        with tf.GradientTape() as tape:
            rows = tf.shape(x)[0]
            loss = model.summed_loss("a", x, y) * scale / tf.cast(rows * 2, tf.float32)
        return acc.step(tape.gradient(loss, model.variables),
                        tf.cast(rows, tf.float32) * count_scale)

    @tf.function
    def step(x, y, scale=1.0, count_scale=1.0):
        return strategy.run(replica_step, args=(x, y, scale, count_scale))

    start = model.values()
    for _, x, y in micro:
        step(x, y)
    result["none"] = weights_record(model.values(), expected, start)

    def refused(scale, count_scale):
        before, iterations = model.values(), int(acc.optimizer.iterations.numpy())
        error = ""
        try:
            for _, x, y in micro[:K]:
                step(x, y, tf.constant(scale), tf.constant(count_scale))
        except tf.errors.InvalidArgumentError as raised:
            error = raised.message
        return dict(error=error, moved=gap(model.values(), before),
                    updates=int(acc.optimizer.iterations.numpy()) - iterations)

    result["non_finite"] = refused(np.nan, 1.0)
    result["zero_total"] = refused(1.0, 0.0)
    result["tasks"] = mirrored_tasks(strategy)
    print("RESULT " + json.dumps(result))


def mirrored_tasks(strategy):
    """One tf.function per task adds inside strategy.run; an update traced
    after both chooses the window's pattern among their unions."""
    micro = micro_tasks(TASKS[:6], [8] * 6)
    expected = keras_big_batches(OPTIMIZERS["adam"], micro)
    with strategy.scope():
        model = Tasks()
        acc = gaviz.Accumulator(OPTIMIZERS["adam"](), model.variables, K)
    start = model.values()

    def replica_add(task, x, y):
        with tf.GradientTape() as tape:
            loss = model.summed_loss(task, x, y) / tf.cast(tf.shape(x)[0] * 2, tf.float32)
        acc.add(tape.gradient(loss, model.variables), tf.cast(tf.shape(x)[0], tf.float32))

    add = {task: tf.function(lambda x, y, task=task: strategy.run(replica_add, args=(task, x, y)))
           for task in ("a", "b")}
    apply = tf.function(acc.apply)
    for i, (task, x, y) in enumerate(micro):
        add[task](x, y)
        if i % K == K - 1:
            apply()
    return weights_record(model.values(), expected, start)


if __name__ == "__main__" and sys.argv[1:] == ["mirrored"]:
    mirrored_main()
