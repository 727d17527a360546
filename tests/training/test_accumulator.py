"""gaviz.Accumulator: the exact window in anyone's loop, against the big batch.

The reference (tests/reference.py) shares no code with gaviz: windows of
micro-batches concatenated into big batches, one eager update each. Under
MirroredStrategy: tests/training/distributed/accumulator_run.py, via test_distributed.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_weights, clone, make_mlp, start_of, weight_gap
from reference import group_windows, micro_batches, train_big_batches

import gaviz
from gaviz.training.loss import sparse_gradients

SIZES = [4, 3, 5, 2, 4, 4, 3]  # ragged; k = 3 leaves a partial window of one
K = 3
WINDOW_ROWS = 12  # the largest window of SIZES: the terms of one big-batch gradient


ROWS = sum(SIZES)


def data(rows=ROWS, seed=0, outputs=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype("float32")
    y = rng.normal(size=(rows, outputs)).astype("float32")
    return x, y


def mse(y, p):
    return tf.reduce_mean(tf.square(y - p), axis=-1)


def reference(model, optimizer, micro, epochs=1, tail="flush"):
    ref = clone(model)
    train_big_batches(ref, optimizer, mse, group_windows(micro, K, tail, epochs))
    return ref


def accumulate(model, acc, micro, epochs=1, graph=True, flush=True):
    """A plain GradientTape loop: a Keras mean loss, count = rows; returns
    what each step said."""

    def micro_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(mse(y, model(x, training=True))) + _penalty(model)
        return acc.step(tape.gradient(loss, model.trainable_variables), tf.shape(x)[0])

    spec = (tf.TensorSpec([None, 5]), tf.TensorSpec([None, 1]))
    step = tf.function(micro_step, input_signature=spec) if graph else micro_step
    said = []
    for _ in range(epochs):
        said += [bool(step(x, y)) for x, y in micro]
        if flush:
            acc.flush()
    return step, said


def _penalty(model):
    return tf.add_n(model.losses) if model.losses else 0.0


OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(0.05),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.01),
    "adamw_clip_ema": lambda: keras.optimizers.AdamW(
        0.05, weight_decay=0.1, global_clipnorm=0.5, use_ema=True, ema_overwrite_frequency=2
    ),
}


@pytest.mark.parametrize("graph", [True, False], ids=["tf_function", "eager"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_equals_the_big_batch_ragged_and_flushed(name, graph):
    x, y = data()
    micro = micro_batches(x, y, SIZES)
    model = make_mlp(kernel_regularizer=keras.regularizers.L2(0.01))
    start = start_of(model)
    expected = reference(model, OPTIMIZERS[name](), micro, epochs=2)
    optimizer = OPTIMIZERS[name]()
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, accumulation_steps=K)
    step, said = accumulate(model, acc, micro, epochs=2, graph=graph)
    assert_same_weights(model, expected, start, terms=WINDOW_ROWS)
    # Updates where a window filled, then the flushed one: 3 per epoch.
    assert said == [False, False, True, False, False, True, False] * 2
    assert int(optimizer.iterations.numpy()) == 6
    if graph:
        assert step.experimental_get_tracing_count() == 1  # step decides in the graph


def test_dividing_by_k_instead_is_the_mean_of_means():
    # The property the test above guards, broken on purpose: a loop that
    # hands every micro-batch count=1 divides the window by k.
    x, y = data()
    micro = micro_batches(x, y, SIZES)
    model = make_mlp()
    expected = reference(model, keras.optimizers.SGD(0.1), micro)
    acc = gaviz.Accumulator(keras.optimizers.SGD(0.1), model.trainable_variables, K)
    for xb, yb in micro:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(mse(yb, model(xb)))
        acc.step(tape.gradient(loss, model.trainable_variables), 1)
    acc.flush()
    assert weight_gap(model, expected) > 1e-3


def test_counts_tokens_for_a_token_level_loss():
    """count = real tokens: each micro-batch's masked mean, weighted by its tokens."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(1, 8, size=(12, 6))
    lengths = rng.integers(1, 7, size=12)
    mask = (np.arange(6)[None, :] < lengths[:, None]).astype("float32")
    targets = rng.normal(size=(12, 6, 1)).astype("float32")
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Embedding(8, 4),
                              keras.layers.Dense(1)])
    expected, initial = clone(model), start_of(model)
    sizes = [5, 4, 3]

    def masked_sum(m, x, t, w):
        return tf.reduce_sum(tf.squeeze(tf.square(m(x) - t), -1) * w)

    with tf.GradientTape() as tape:  # the big batch: all tokens over all real tokens
        loss = masked_sum(expected, tokens, targets, mask) / mask.sum()
    grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, expected.trainable_variables)]
    keras.optimizers.SGD(0.5).apply_gradients(zip(grads, expected.trainable_variables))

    def run(count_of):
        trained = clone(model)
        acc = gaviz.Accumulator(keras.optimizers.SGD(0.5), trained.trainable_variables, 3)
        start = 0
        for size in sizes:
            x, t, w = (a[start:start + size] for a in (tokens, targets, mask))
            with tf.GradientTape() as tape:
                loss = masked_sum(trained, x, t, w) / w.sum()  # a mean over real tokens
            acc.step(tape.gradient(loss, trained.trainable_variables), count_of(x, w))
            start += size
        return trained

    # A per-token loss: the terms are the big batch's real tokens.
    assert_same_weights(run(lambda x, w: w.sum()), expected, initial, terms=int(mask.sum()))
    assert weight_gap(run(lambda x, w: len(x)), expected) > 1e-3  # rows where the loss divides by tokens


def test_a_loss_scale_optimizer_unscales_once_and_skips_a_non_finite_window():
    x, y = data(rows=sum(SIZES[:6]))
    micro = micro_batches(x, y, SIZES[:6])
    model = make_mlp()
    start = start_of(model)
    expected = reference(model, keras.optimizers.Adam(0.05), micro)
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.05))
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)

    @tf.function
    def micro_step(xb, yb, poison):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(mse(yb, model(xb, training=True)))
            scaled = optimizer.scale_loss(loss) * poison
        return acc.step(tape.gradient(scaled, model.trainable_variables), tf.shape(xb)[0])

    for xb, yb in micro:
        micro_step(xb, yb, tf.constant(1.0))
    assert_same_weights(model, expected, start, terms=WINDOW_ROWS)
    assert int(optimizer.iterations.numpy()) == 2
    scale, before = float(optimizer.dynamic_scale.numpy()), model.get_weights()
    for xb, yb in micro[:K - 1]:
        micro_step(xb, yb, tf.constant(1.0))
    micro_step(*micro[K - 1], tf.constant(np.inf))  # one micro-batch overflows
    assert int(optimizer.iterations.numpy()) == 2  # the whole window skipped
    assert float(optimizer.dynamic_scale.numpy()) == scale / 2
    assert max(np.max(np.abs(a - b)) for a, b in zip(model.get_weights(), before)) == 0
    assert int(acc.micro_steps_in_window.numpy()) == 0  # and emptied


def test_learning_rate_schedules_read_updates():
    x, y = data()
    micro = micro_batches(x, y, SIZES)
    model = make_mlp()

    def schedule():
        return keras.optimizers.schedules.PiecewiseConstantDecay([1, 2], [0.3, 0.1, 0.01])

    start = start_of(model)
    expected = reference(model, keras.optimizers.SGD(schedule()), micro)
    optimizer = keras.optimizers.SGD(schedule())
    accumulate(model, gaviz.Accumulator(optimizer, model.trainable_variables, K), micro)
    assert_same_weights(model, expected, start, terms=WINDOW_ROWS)


def test_two_accumulators_at_once():
    """A GAN-shaped loop: two models, two optimizers, two windows."""
    x, y = data()
    micro = micro_batches(x, y, SIZES)
    first, second = make_mlp(seed=1), make_mlp(seed=2)
    starts = [start_of(m) for m in (first, second)]
    expected = [reference(m, keras.optimizers.Adam(0.05), micro) for m in (first, second)]
    accs = [gaviz.Accumulator(keras.optimizers.Adam(0.05), m.trainable_variables, K)
            for m in (first, second)]

    @tf.function(input_signature=(tf.TensorSpec([None, 5]), tf.TensorSpec([None, 1])))
    def micro_step(xb, yb):
        for model, acc in zip((first, second), accs):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(mse(yb, model(xb, training=True)))
            acc.step(tape.gradient(loss, model.trainable_variables), tf.shape(xb)[0])

    for xb, yb in micro:
        micro_step(xb, yb)
    for acc in accs:
        acc.flush()
    assert_same_weights(first, expected[0], starts[0], terms=WINDOW_ROWS)
    assert_same_weights(second, expected[1], starts[1], terms=WINDOW_ROWS)


def test_a_checkpoint_saved_mid_window_continues_onto_the_same_weights(tmp_path):
    x, y = data()
    micro = micro_batches(x, y, SIZES)
    model = make_mlp()
    start = clone(model)
    optimizer = keras.optimizers.Adam(0.05)
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)
    accumulate(model, acc, micro)  # the uninterrupted run
    resumed_model = clone(start)
    resumed_optimizer = keras.optimizers.Adam(0.05)
    resumed = gaviz.Accumulator(resumed_optimizer, resumed_model.trainable_variables, K)
    accumulate(resumed_model, resumed, micro[:4], flush=False)  # mid-window: 1 of 3
    path = tf.train.Checkpoint(model=resumed_model, optimizer=resumed_optimizer,
                               accumulator=resumed).save(str(tmp_path / "ckpt"))
    fresh_model = clone(start)
    fresh_optimizer = keras.optimizers.Adam(0.05)
    fresh = gaviz.Accumulator(fresh_optimizer, fresh_model.trainable_variables, K)
    tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer,
                        accumulator=fresh).restore(path).assert_consumed()
    assert int(fresh.micro_steps_in_window.numpy()) == 1
    accumulate(fresh_model, fresh, micro[4:])
    assert_same_weights(fresh_model, model, start.get_weights(), terms=WINDOW_ROWS)


def test_an_empty_window_updates_nothing():
    model = make_mlp()
    optimizer = keras.optimizers.Adam(0.05)
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)
    assert not bool(acc.apply()) and not bool(acc.flush())
    assert int(optimizer.iterations.numpy()) == 0


class OwnStep(keras.Model):
    """A model with its own train_step, accumulating with gaviz.Accumulator."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        self.accumulator.step(tape.gradient(loss, self.trainable_variables), tf.shape(x)[0])
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return {"loss": loss}


def own_step_model(seed=1):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    return OwnStep(inputs, keras.layers.Dense(1)(hidden))


def test_a_train_step_under_model_fit_equals_model_fit_on_the_big_batch():
    x, y = data(rows=44)
    x_val, y_val = data(rows=16, seed=3)
    model = own_step_model()
    start = start_of(model)
    model.compile(keras.optimizers.Adam(0.05), "mse")
    model.accumulator = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0,
                        validation_data=(x_val, y_val),
                        callbacks=[gaviz.FlushAtEpochEnd(model.accumulator)])
    big = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                            keras.layers.Dense(1)])
    big.set_weights(own_step_model().get_weights())
    big.compile(keras.optimizers.Adam(0.05), "mse")
    expected = big.fit(x, y, batch_size=4 * K, epochs=2, shuffle=False, verbose=0,
                       validation_data=(x_val, y_val))
    assert_same_weights(model, big, start, terms=4 * K)
    # 44 rows: 3 full windows of 12 and a tail of 8, flushed before validation.
    assert int(model.optimizer.iterations.numpy()) == 8
    np.testing.assert_allclose(history.history["val_loss"], expected.history["val_loss"],
                               rtol=1e-5)


# --------------------------------------------------------------- sparse gradients


def bag_of_embeddings(seed=4, vocab=20):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((6,), dtype="int32"), keras.layers.Embedding(vocab, 4),
        keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1),
    ])


def token_data(rows=24, seed=5, vocab=20):
    rng = np.random.default_rng(seed)
    # A skewed vocabulary: a few tokens repeat within every batch.
    tokens = np.minimum(rng.geometric(0.35, size=(rows, 6)) - 1, vocab - 1).astype("int32")
    return tokens, rng.normal(size=(rows, 1)).astype("float32")


def densified_reference(model, optimizer, micro):
    """The textbook big batch: the gradient made dense before the update."""
    ref = clone(model)
    for x, y in group_windows(micro, K, "flush", 1):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(mse(y, ref(x, training=True)))
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, ref.trainable_variables)]
        optimizer.apply_gradients(zip(grads, ref.trainable_variables))
    return ref


def test_model_fit_on_the_big_batch_lands_elsewhere_with_adam_only():
    """Why the window keeps a sparse gradient's occurrences, measured: Keras applies
    them one by one, so Model.fit lands away from the densified big batch under
    Adam (where a dense window would land), not under SGD."""
    x, y = token_data()
    start = start_of(bag_of_embeddings())
    trained = {}
    for name, make in {"adam": lambda: keras.optimizers.Adam(0.05),
                       "sgd": lambda: keras.optimizers.SGD(0.5)}.items():
        model = bag_of_embeddings()
        micro = micro_batches(x, y, [4] * 6)  # windows of K = 3: batches of 12
        expected = densified_reference(model, make(), micro)
        model.compile(make(), "mse")
        model.fit(x, y, batch_size=12, shuffle=False, verbose=0)
        trained[name] = model, expected
    assert weight_gap(*trained["adam"]) > 1e-3
    assert_same_weights(*trained["sgd"], start, terms=4 * K)


def test_the_one_row_example():
    """One row looked up 50 times with gradient 1: Keras's Adam moves it 0.707
    where Adam on the summed gradient moves it 0.1 (learning rate 0.1)."""
    table = keras.Variable(np.zeros((2, 1), "float32"))
    slices = tf.IndexedSlices(tf.ones((50, 1)), tf.zeros(50, tf.int32), tf.constant([2, 1]))
    keras.optimizers.Adam(0.1).apply_gradients([(slices, table)])
    dense = keras.Variable(np.zeros((2, 1), "float32"))
    keras.optimizers.Adam(0.1).apply_gradients([(tf.convert_to_tensor(slices), dense)])
    assert abs(float(table.numpy()[0, 0]) + 0.7071) < 1e-3
    assert abs(float(dense.numpy()[0, 0]) + 0.1) < 1e-4


def test_a_sparse_gradient_summed_densely_is_said_naming_its_variable():
    """Where a sparse gradient meets a dense window (its variable's gradient
    changed kind after the window was made), gaviz says so, naming it, unless the
    optimizer is linear in the gradient or the weight penalty made it dense."""
    model = bag_of_embeddings()
    variables = model.trainable_variables
    x, y = token_data()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(mse(y, model(x, training=True)))
    gradients = tape.gradient(loss, variables)
    windows = [tf.zeros(v.shape) for v in variables]
    say = sparse_gradients.warn_where_densified
    with pytest.warns(gaviz.SparseGradientWarning, match=r"embeddings got sparse.*Adam"):
        assert say(keras.optimizers.Adam(), gradients, windows, variables)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not say(keras.optimizers.SGD(0.1, momentum=0.9), gradients, windows, variables)
        assert not say(keras.optimizers.Adam(), gradients, windows, variables, expected={0})


# -------------------------------------------------------------------- bad input


def test_bad_input_is_named_and_changes_nothing():
    model = make_mlp()
    optimizer = keras.optimizers.Adam(0.05)
    acc = gaviz.Accumulator(optimizer, model.trainable_variables, K)
    x, y = data(rows=4)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(mse(y, model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    with pytest.raises(ValueError, match=r"`count` must be > 0.*count=0"):
        acc.add(grads, 0)
    with pytest.raises(ValueError, match=r"`count` must be > 0.*count=-2"):
        acc.step(grads, -2)
    with pytest.raises(ValueError, match=r"`count` must be a scalar.*shape \(2,\)"):
        acc.add(grads, [2, 2])
    with pytest.raises(ValueError, match=r"`gradients` must hold one gradient per variable "
                                         r"\(4.*Received: 3"):
        acc.add(grads[:3], 4)
    with pytest.raises(ValueError, match=r"`gradients` must have the shapes of `variables`"):
        acc.add([grads[1], grads[0]] + grads[2:], 4)
    in_graph = tf.function(lambda c: acc.add(grads, c))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`count` must be > 0"):
        in_graph(tf.constant(0.0))
    assert int(acc.micro_steps_in_window.numpy()) == 0
    assert float(acc.window_count.numpy()) == 0
    assert all(not np.any(s.numpy()) for s in acc.gradient_sums)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(accumulation_steps=0), ValueError, r"`accumulation_steps` must be an integer >= 1"),
    (dict(accumulation_steps=2.5), ValueError, r"`accumulation_steps` must be an integer"),
    (dict(variables=[]), ValueError, r"`variables` must list the variables"),
    (dict(variables=[np.zeros(3)]), TypeError, r"`variables` must hold tf.Variable"),
    (dict(optimizer="adam"), TypeError, r"`optimizer` must be a keras.optimizers.Optimizer"),
    (dict(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)), ValueError,
     r"`optimizer` must not accumulate gradients itself"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    model = make_mlp()
    arguments = dict(optimizer=keras.optimizers.SGD(0.1), variables=model.trainable_variables,
                     accumulation_steps=2)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        gaviz.Accumulator(**arguments)


def test_flush_at_epoch_end_takes_accumulators_only():
    with pytest.raises(TypeError, match=r"`accumulators` must be gaviz.Accumulator"):
        gaviz.FlushAtEpochEnd(keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match=r"at least one"):
        gaviz.FlushAtEpochEnd()
