"""An Embedding's sparse gradients train as Model.fit trains them, under every optimizer.

``Model.fit`` hands its optimizer an Embedding's gradient as ``tf.IndexedSlices``,
one row per lookup, and Keras's optimizers transform each row before rows of
one index are summed (Adam's second moment gets the sum of the squares). The
window keeps a sparse gradient's occurrences and hands over the big batch's
own slices (gaviz/training/window/occurrences.py): weights, optimizer
variables and ``history.history`` equal ``Model.fit(batch_size=k * b)``'s by the
one rule (closeness), on tokens whose frequencies are skewed (a few repeat in
every batch: where a dense window would differ most).

Every comparison here was seen failing with the window made dense, as gaviz
made it before (all but SGD's and Lion's, whose updates are linear in the
gradient); tests/training/test_accumulator.py keeps how far that lands from
Model.fit measured."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_history, assert_same_weights, make_tagger, padded_tokens, start_of
from keras import ops

import gaviz
from gaviz.training.verify.closeness import variable_gaps

B, K, ROWS, LENGTH, VOCAB = 4, 3, 44, 6, 30  # windows of 12 rows, the last of 8
EPOCHS = 2

#: Every built-in Keras optimizer but the wrapper and the combiner (as
#: tests/training/test_every_optimizer.py), with EMA, weight decay and clipping.
OPTIMIZERS = {
    "Adam": lambda: keras.optimizers.Adam(0.05),
    "AdamW": lambda: keras.optimizers.AdamW(0.05, weight_decay=0.1),
    "RMSprop": lambda: keras.optimizers.RMSprop(0.02, momentum=0.5, centered=True),
    "Adagrad": lambda: keras.optimizers.Adagrad(0.2),
    "Adamax": lambda: keras.optimizers.Adamax(0.05),
    "Nadam": lambda: keras.optimizers.Nadam(0.05),
    "Adafactor": lambda: keras.optimizers.Adafactor(0.1),
    "Ftrl": lambda: keras.optimizers.Ftrl(0.2, l1_regularization_strength=0.01,
                                          l2_regularization_strength=0.01),
    "SGD": lambda: keras.optimizers.SGD(0.5, momentum=0.9, nesterov=True),
    "Lion": lambda: keras.optimizers.Lion(0.01),
    "Adadelta": lambda: keras.optimizers.Adadelta(5.0),
    "Lamb": lambda: keras.optimizers.Lamb(0.05),
    "Muon": lambda: keras.optimizers.Muon(0.05),
    "ScheduleFreeAdamW": lambda: keras.optimizers.ScheduleFreeAdamW(0.05),
    "Adam with use_ema": lambda: keras.optimizers.Adam(0.05, use_ema=True,
                                                       ema_overwrite_frequency=2),
    "AdamW with clipnorm": lambda: keras.optimizers.AdamW(0.05, clipnorm=0.05),
    "Adam with global_clipnorm": lambda: keras.optimizers.Adam(0.05, global_clipnorm=0.05),
}


def skewed_tokens(rows=ROWS, seed=5, vocab=VOCAB, length=LENGTH):
    """Token rows where a few tokens repeat in every batch, and regression targets."""
    rng = np.random.default_rng(seed)
    tokens = np.minimum(rng.geometric(0.3, size=(rows, length)), vocab - 1).astype("int32")
    return tokens, rng.normal(size=(rows, 1)).astype("float32")


def pooled(seed=4, vocab=VOCAB, mask_zero=False, outputs=1):
    """Embedding, pooling, Dense: the text classifier of Keras's examples, tiny."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((LENGTH,), dtype="int32"),
        keras.layers.Embedding(vocab, 4, mask_zero=mask_zero, name="tokens"),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(outputs),
    ])


def two_tables(seed=4):
    """Token and position tables, added (a transformer's input)."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((LENGTH,), dtype="int32")
    positions = keras.Input((LENGTH,), dtype="int32")
    embedded = keras.layers.Add()([keras.layers.Embedding(VOCAB, 4, name="tokens")(tokens),
                                   keras.layers.Embedding(LENGTH, 4, name="positions")(positions)])
    pooled_ = keras.layers.GlobalAveragePooling1D()(keras.layers.Dense(4, activation="tanh")(embedded))
    return keras.Model([tokens, positions], keras.layers.Dense(1)(pooled_))


class TiedTable(keras.layers.Layer):
    """One table looked up at the input and multiplied at the output (tied weights):
    a sparse and a dense gradient on one variable, which the tape adds densely."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=(VOCAB, 4), name="table")

    def call(self, tokens):
        hidden = ops.tanh(ops.mean(ops.take(self.table, tokens, axis=0), axis=1))
        return ops.matmul(hidden, ops.transpose(self.table))


def tied(seed=4):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((LENGTH,), dtype="int32"), TiedTable()])


def compiled(model, optimizer, loss="mse", **kwargs):
    model.compile(optimizer, loss, **kwargs)
    model.optimizer.build(model.trainable_variables)
    return model


def optimizer_values(model):
    return [np.array(v) for v in model.optimizer.variables]


def assert_same(got, expected, start, terms, names, rounding=None, what="weights"):
    """Each variable equal by the one rule (its gap against how far it moved;
    ``rounding="float16"`` for mixed precision)."""
    gaps = variable_gaps(got, expected, start, terms, names, rounding)
    unequal = [g for g in gaps if not g.equal]
    assert not unequal, f"{what} differ: " + "; ".join(
        f"{g.name}: gap {g.gap:.3g} = {g.relative:.3g} of its movement" for g in unequal[:4])


def assert_same_optimizer(got, expected, start, terms, rounding=None):
    """Each optimizer variable equal by the one rule."""
    assert_same(optimizer_values(got), optimizer_values(expected), start, terms,
                [v.path for v in expected.optimizer.variables], rounding, "optimizer variables")


def both(make, optimizer, x, y, loss="mse", fit_kwargs=None, trainer_kwargs=None,
         keras_rows=None, epochs=EPOCHS, compile_kwargs=None):
    """``make()`` trained by gaviz (micro-batches of B, k = K) and by Model.fit
    (batches of K * B, ``keras_rows`` of the rows if given): ``(ours, theirs,
    weights' start, optimizer's start, histories)``."""
    fit_kwargs, compile_kwargs = fit_kwargs or {}, compile_kwargs or {}
    ours = compiled(make(), optimizer(), loss, **compile_kwargs)
    theirs = compiled(make(), optimizer(), loss, **compile_kwargs)
    start, optimizer_start = start_of(ours), optimizer_values(ours)
    trainer = gaviz.AccumulationTrainer(ours, accumulation_steps=K, **(trainer_kwargs or {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gaviz.SparseGradientWarning)  # nothing densified
        history = trainer.fit(x, y, batch_size=B, epochs=epochs, shuffle=False, verbose=0,
                              **fit_kwargs)
    keep = slice(None) if keras_rows is None else slice(keras_rows)
    keras_kwargs = {name: value[keep] if isinstance(value, np.ndarray) else value
                    for name, value in fit_kwargs.items()}
    x_keras = [part[keep] for part in x] if isinstance(x, list) else x[keep]
    expected = theirs.fit(x_keras, y[keep], batch_size=K * B, epochs=epochs, shuffle=False,
                          verbose=0, **keras_kwargs)
    return trainer, ours, theirs, start, optimizer_start, (history, expected)


def assert_equal_to_keras(trained, terms=K * B, rounding=None):
    trainer, ours, theirs, start, optimizer_start, (got, expected) = trained
    assert_same(ours.get_weights(), theirs.get_weights(), start, terms,
                [v.path for v in theirs.weights], rounding)
    assert_same_optimizer(ours, theirs, optimizer_start, terms, rounding)
    rtol = 1e-5 if rounding is None else 1e-3
    assert_same_history(got.history, expected.history, rtol=rtol)
    assert trainer.window_loop.sparse, "no variable's window held occurrences"


# ----------------------------------------------------------- every optimizer


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_equals_model_fit(name):
    x, y = skewed_tokens()
    assert_equal_to_keras(both(pooled, OPTIMIZERS[name], x, y))


def test_every_built_in_optimizer_is_tried():
    tried = {name.split(" ")[0] for name in OPTIMIZERS}
    built_in = {name for name, value in vars(keras.optimizers).items()
                if isinstance(value, type) and issubclass(value, keras.optimizers.Optimizer)}
    assert built_in - {"LossScaleOptimizer", "MultiOptimizer", "Optimizer"} <= tried


# ----------------------------------------------------------------- models


def test_a_masked_tagger_equals_model_fit():
    """Embedding(mask_zero=True): divided by the window's real tokens, its slices Keras's."""
    tokens, labels = padded_tokens(ROWS, vocab=VOCAB)
    trained = both(lambda: make_tagger(vocab=VOCAB), OPTIMIZERS["Adam"], tokens, labels,
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert_equal_to_keras(trained, terms=K * B * LENGTH)


def test_two_tables_equal_model_fit():
    x, y = skewed_tokens()
    positions = np.tile(np.arange(LENGTH, dtype="int32"), (ROWS, 1))
    trained = both(two_tables, OPTIMIZERS["RMSprop"], [x, positions], y)
    assert_equal_to_keras(trained)
    assert trained[0].window_loop.sparse == {0, 1}  # both tables' windows hold occurrences


def test_a_tied_table_is_dense_as_in_model_fit():
    """The tape adds the lookup's slices and the output's dense gradient into one
    dense gradient, in Model.fit as in each micro-step: the window is a dense sum."""
    x, y = skewed_tokens()
    labels = np.random.default_rng(1).integers(0, VOCAB, ROWS)
    trained = both(tied, OPTIMIZERS["Adam"], x, labels,
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    trainer, ours, theirs, start, _, (got, expected) = trained
    assert not trainer.window_loop.sparse
    assert_same_weights(ours, theirs, start, K * B)
    assert_same_history(got.history, expected.history)


def test_a_regularized_table_is_dense_as_in_model_fit():
    """An embeddings_regularizer's dense gradient makes Model.fit's gradient dense."""
    def make():
        keras.utils.set_random_seed(4)
        return keras.Sequential([
            keras.Input((LENGTH,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 4, embeddings_regularizer=keras.regularizers.L2(0.01)),
            keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])

    x, y = skewed_tokens()
    trained = both(make, OPTIMIZERS["Adagrad"], x, y)
    trainer, ours, theirs, start, _, (got, expected) = trained
    assert not trainer.window_loop.sparse
    assert_same_weights(ours, theirs, start, K * B)
    assert_same_history(got.history, expected.history)


# ------------------------------------------------------------- fit's arguments


def test_sample_weights_equal_model_fit():
    x, y = skewed_tokens()
    weights = np.random.default_rng(2).uniform(0.1, 2.0, ROWS).astype("float32")
    assert_equal_to_keras(both(pooled, OPTIMIZERS["Nadam"], x, y,
                               fit_kwargs={"sample_weight": weights}))


def test_class_weights_equal_model_fit():
    x, _ = skewed_tokens()
    labels = np.random.default_rng(3).integers(0, 3, ROWS)
    trained = both(lambda: pooled(outputs=3), OPTIMIZERS["Adamax"], x, labels,
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                   fit_kwargs={"class_weight": {0: 0.5, 1: 2.0, 2: 1.0}})
    assert_equal_to_keras(trained)


@pytest.mark.parametrize("tail", ["drop", "carry"])
def test_the_other_tails_equal_model_fit_on_their_rows(tail):
    """drop: Model.fit on the full windows' rows; carry: windows span epochs, as
    Model.fit on the epochs' rows end to end (the last window left open)."""
    x, y = skewed_tokens()
    if tail == "drop":
        keras_rows, x_keras, y_keras, epochs = 36, x, y, EPOCHS
    else:
        keras_rows, epochs = 84, 1
        x_keras, y_keras = np.concatenate([x, x]), np.concatenate([y, y])
    ours = compiled(pooled(), OPTIMIZERS["Adam"]())
    theirs = compiled(pooled(), OPTIMIZERS["Adam"]())
    start, optimizer_start = start_of(ours), optimizer_values(ours)
    trainer = gaviz.AccumulationTrainer(ours, accumulation_steps=K, tail=tail)
    trainer.fit(x, y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0)
    theirs.fit(x_keras[:keras_rows], y_keras[:keras_rows], batch_size=K * B, epochs=epochs,
               shuffle=False, verbose=0)
    assert_same_weights(ours, theirs, start, K * B)
    assert_same_optimizer(ours, theirs, optimizer_start, K * B)
    assert trainer.window_loop.sparse
    if tail == "carry":
        assert int(trainer.micro_steps_in_window.numpy()) == 1  # one micro-batch carried on


def test_a_dataset_with_a_short_last_micro_batch_equals_model_fit():
    """A dataset's last micro-batch short (42 rows): its slices are fewer, the window ragged."""
    x, y = skewed_tokens(rows=42)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(B)
    ours = compiled(pooled(), OPTIMIZERS["Adagrad"]())
    theirs = compiled(pooled(), OPTIMIZERS["Adagrad"]())
    start = start_of(ours)
    history = gaviz.AccumulationTrainer(ours, accumulation_steps=K).fit(dataset, epochs=EPOCHS,
                                                                       verbose=0)
    expected = theirs.fit(x, y, batch_size=K * B, epochs=EPOCHS, shuffle=False, verbose=0)
    assert_same_weights(ours, theirs, start, K * B)
    assert_same_history(history.history, expected.history)


@pytest.mark.parametrize("jit_compile", [True, "auto"])
def test_under_xla_equals_model_fit(jit_compile):
    x, y = skewed_tokens()
    trained = both(pooled, OPTIMIZERS["Adam"], x, y, trainer_kwargs={"jit_compile": jit_compile})
    assert trained[0].jit_compile == (jit_compile is True)  # True: XLA compiles each micro-step
    assert_equal_to_keras(trained)


def test_several_windows_per_call_equal_model_fit():
    x, y = skewed_tokens()
    trained = both(pooled, OPTIMIZERS["Adam"], x, y, trainer_kwargs={"windows_per_call": 3})
    assert_equal_to_keras(trained)


def test_mixed_precision_with_loss_scaling_equals_model_fit():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, y = skewed_tokens()
        # A scale at which no window overflows (compile's 2**15 overflows
        # Model.fit's first step, not gaviz's: tests/training/test_precision_and_memory.py).
        trained = both(pooled, lambda: keras.optimizers.LossScaleOptimizer(
            OPTIMIZERS["Adam"](), initial_scale=2.0**8), x, y)
        assert isinstance(trained[1].optimizer, keras.optimizers.LossScaleOptimizer)
        assert_equal_to_keras(trained, rounding="float16")
    finally:
        keras.mixed_precision.set_global_policy("float32")


# --------------------------------------------------------- the Accumulator


def accumulator_epochs(model, x, y, graph: bool):
    """An own loop: each micro-batch's tape gradients as they come, then a flush."""
    acc = gaviz.Accumulator(model.optimizer, model.trainable_variables, K)
    loss = keras.losses.MeanSquaredError()

    def step(xb, yb):
        with tf.GradientTape() as tape:
            value = loss(yb, model(xb, training=True))
        return acc.step(tape.gradient(value, model.trainable_variables), tf.shape(xb)[0])

    step = tf.function(step) if graph else step
    for _ in range(EPOCHS):
        for s in range(0, len(x), B):
            step(x[s:s + B], y[s:s + B])
        acc.flush()
    return acc


@pytest.mark.parametrize("name", ["Adam", "Adagrad", "AdamW with clipnorm", "Adam with use_ema"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
def test_the_accumulator_equals_model_fit(name, graph):
    x, y = skewed_tokens()
    ours = compiled(pooled(), OPTIMIZERS[name]())
    theirs = compiled(pooled(), OPTIMIZERS[name]())
    start, optimizer_start = start_of(ours), optimizer_values(ours)
    acc = accumulator_epochs(ours, x, y, graph)
    ours.optimizer.finalize_variable_values(ours.trainable_variables)  # as fit does (EMA)
    theirs.fit(x, y, batch_size=K * B, epochs=EPOCHS, shuffle=False, verbose=0)
    assert_same_weights(ours, theirs, start, K * B)
    assert_same_optimizer(ours, theirs, optimizer_start, K * B)
    assert acc.window.sparse == {0}


def test_the_accumulator_refuses_a_gradient_that_changes_kind():
    model = compiled(pooled(), OPTIMIZERS["Adam"]())
    variables = model.trainable_variables
    acc = gaviz.Accumulator(model.optimizer, variables, K)
    x, y = skewed_tokens()
    with tf.GradientTape() as tape:
        value = keras.losses.MeanSquaredError()(y[:B], model(x[:B]))
    gradients = tape.gradient(value, variables)
    acc.add(gradients, B)
    dense = [tf.convert_to_tensor(g) for g in gradients]
    with pytest.raises(ValueError, match="keep their kind.*tokens/embeddings"):
        acc.add(dense, B)


def test_a_window_of_more_rows_than_its_table_keeps_them_all():
    """The choice where occurrences outgrow the dense table (here windows of 72 rows,
    three micro-batches of 4 x 6 tokens, of a table of 5): gaviz keeps every row, since
    Model.fit's update needs each, and stays equal to it; its memory is the rows'
    (docs/guide/own_loop.md, benchmark 6)."""
    x, y = skewed_tokens(vocab=5)
    ours = compiled(pooled(vocab=5), OPTIMIZERS["Adam"]())
    theirs = compiled(pooled(vocab=5), OPTIMIZERS["Adam"]())
    start = start_of(ours)
    acc = gaviz.Accumulator(ours.optimizer, ours.trainable_variables, K)
    loss = keras.losses.MeanSquaredError()
    kept = []
    for s in range(0, ROWS, B):
        with tf.GradientTape() as tape:
            value = loss(y[s:s + B], ours(x[s:s + B], training=True))
        gradients = tape.gradient(value, ours.trainable_variables)
        if int(acc.micro_steps_in_window) == K - 1:
            kept.append(len(acc.gradient_sums[0].values.numpy()))
        acc.step(gradients, B)
    acc.flush()
    theirs.fit(x, y, batch_size=K * B, shuffle=False, verbose=0)
    assert kept == [(K - 1) * B * LENGTH] * 3  # 48 rows of a 5-row table before each last step
    assert_same_weights(ours, theirs, start, K * B)
