"""trainer.verify: gaviz's first windows against Keras's own Model.fit at the big
batch, on the user's model and rows. Equal where the trainer is exact, a named
cause where it is not, "different" for gaviz's own defects (the gallery's broken
trainers as mutants), and every object of the user's put back bit for bit."""

import random
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import make_mlp
from test_added_loss import Router, sequence_model
from test_added_loss import data as sequences

import gaviz
from gaviz.training.verify import rows as verified_rows

K, B = 4, 16  # verified at micro-batches of ceil(16 / 4) = 4, Model.fit at 16


@pytest.fixture
def rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 5)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(120, 1))).astype("float32")


def mlp(*extra, optimizer=None, seed=1):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                              *extra, keras.layers.Dense(1)])
    model.compile(optimizer or keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model


def state_of(trainer):
    model = trainer.model
    variables = [*model.variables, *model.optimizer.variables, *model.metrics_variables,
                 *trainer.state.variables]
    return [np.array(v.numpy()) for v in variables]


def test_the_scaled_micro_batch_and_the_rows_cover_two_windows_and_a_ragged_tail():
    assert verified_rows.verified_micro_batch_size(16, 4) == 4
    assert verified_rows.verified_micro_batch_size(10, 4) == 3  # Model.fit's batch 12
    assert verified_rows.rows_needed(4, 4) == 4 * 9 + 2  # 2 x 4 + 2 micro-batches, last of 2
    assert verified_rows.rows_needed(3, 1) == 3 * 2 + 2


@pytest.mark.parametrize("feed", ["arrays", "dataset"])
def test_equal_on_an_exact_model_and_everything_put_back_bit_for_bit(rows, feed):
    x, y = rows
    trainer = gaviz.AccumulationTrainer(mlp(), accumulation_steps=K)
    trainer.fit(x[:32], y[:32], batch_size=B, verbose=0)  # a trainer that has trained
    before, random_state = state_of(trainer), np.random.get_state()
    data = (x, y) if feed == "arrays" else (
        tf.data.Dataset.from_tensor_slices((x, y)).shuffle(120, seed=0).batch(B), None)
    result = trainer.verify(*data, batch_size=B if feed == "arrays" else None)
    assert result.equal, result
    assert (result.micro_batch_size, result.accumulation_steps, result.rows) == (4, K, 38)
    assert result.micro_batches == 10 and not result.causes
    assert result.gap < 1e-4 and "Equal: gaviz is Model.fit on this model" in str(result)
    assert {"loss", "mae"} <= set(result.logs)
    after = state_of(trainer)
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert all(np.array_equal(a, b) for a, b in zip(random_state[1:2], np.random.get_state()[1:2]))


def test_sample_and_class_weights_are_verified_as_fit_takes_them(rows):
    x, y = rows
    weights = np.random.default_rng(1).uniform(0.1, 2.0, len(x)).astype("float32")
    trainer = gaviz.AccumulationTrainer(mlp(), accumulation_steps=K)
    assert trainer.verify(x, y, batch_size=B, sample_weight=weights).equal
    keras.utils.set_random_seed(2)
    classifier = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    classifier.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(
        from_logits=True), metrics=["accuracy"])
    labels = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")
    result = gaviz.AccumulationTrainer(classifier, accumulation_steps=3).verify(
        x, labels, batch_size=9, class_weight={0: 1.0, 1: 3.0, 2: 0.5})
    assert result.equal, result


#: The gallery's broken trainers as mutants of gaviz, with what each needs, and a
#: variable its defect must show in (the moving average lives in the optimizer).
MUTANTS = {
    "missing_reset": ({}, "dense"),
    "dropped_tail": ({}, "dense"),
    "mean_of_means": ({}, "dense"),
    "update_every_micro_step": ({}, "dense"),
    "under_scaled_tail": ({}, "dense"),
    "schedule_per_micro_step": (dict(optimizer=keras.optimizers.SGD(
        keras.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5))), "dense"),
    "ema_per_micro_step": (dict(optimizer=keras.optimizers.SGD(
        0.1, use_ema=True, ema_momentum=0.5)), "average"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_defect_of_gaviz_is_found_different_with_its_variables_named(rows, name):
    settings, shows_in = MUTANTS[name]
    optimizer = settings.get("optimizer")
    model = mlp(optimizer=None if optimizer is None else type(optimizer).from_config(
        optimizer.get_config()))
    result = gaviz.PITFALLS[name](model, model.optimizer, accumulation_steps=K).verify(
        *rows, batch_size=B)
    assert not result.equal, result
    assert any(shows_in in gap.name for gap in result.differing), result
    assert "Different: gaviz is not Model.fit" in str(result)


def test_dropout_is_found_by_a_run_with_it_off(rows):
    result = gaviz.AccumulationTrainer(mlp(keras.layers.Dropout(0.3, name="drop")),
                                       accumulation_steps=K).verify(*rows, batch_size=B)
    assert not result.equal and result.kind == "equal up to random draws"
    (cause,) = result.causes
    assert cause.name == "random layers" and "with drop off the two runs are equal" in cause.evidence
    assert "only statistically" in cause.advice


def test_batch_statistics_are_named(rows):
    with pytest.warns(UserWarning, match="BatchNormalization"):
        trainer = gaviz.AccumulationTrainer(mlp(keras.layers.BatchNormalization(name="norm")),
                                            accumulation_steps=K)
    result = trainer.verify(*rows, batch_size=B)
    assert [c.name for c in result.causes] == ["batch statistics"]
    assert "norm normalize each micro-batch" in result.causes[0].evidence


def test_sparse_gradients_under_adam_are_equal():
    """An Embedding's slices reach Adam as Model.fit hands them (once named as a
    difference, before the window kept them)."""
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(20, 3),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.05), loss="mse")
    rng = np.random.default_rng(0)
    x = np.minimum(rng.geometric(0.3, (60, 4)), 19).astype("int32")  # tokens repeating
    y = rng.normal(size=(60, 1)).astype("float32")
    result = gaviz.AccumulationTrainer(model, accumulation_steps=3).verify(x, y, batch_size=6)
    assert result.equal and not result.causes, result


def test_a_router_loss_over_a_window_is_named():
    x, y = sequences()
    with pytest.warns(gaviz.InexactAddedLoss):
        result = gaviz.AccumulationTrainer(sequence_model(lambda: Router(name="router")),
                                           accumulation_steps=3).verify(x, y, batch_size=6)
    assert not result.equal
    assert [c.name for c in result.causes] == ["a loss added with add_loss"], result


def test_an_unexplained_difference_is_said_to_be_unexplained(rows):
    result = gaviz.PITFALLS["missing_reset"](mlp(), accumulation_steps=K).verify(
        *rows, batch_size=B)
    assert [c.name for c in result.causes] == ["unexplained"]
    assert "please report it" in result.causes[0].advice


def test_fit_with_verify_trains_as_fit_does_when_equal(rows, capsys):
    x, y = rows
    verified, plain = mlp(), mlp()
    gaviz.AccumulationTrainer(verified, accumulation_steps=K).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verify=True)
    assert "Equal: gaviz is Model.fit on this model" in capsys.readouterr().out
    gaviz.AccumulationTrainer(plain, accumulation_steps=K).fit(
        x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(verified.get_weights(), plain.get_weights()))


def test_fit_with_verify_trains_nothing_where_gaviz_differs(rows):
    model = mlp(keras.layers.Dropout(0.5))
    before = [np.array(w) for w in model.get_weights()]
    with pytest.raises(gaviz.NotExact, match="(?s)Different.*the tail.*verify=False") as raised:
        gaviz.AccumulationTrainer(model, accumulation_steps=K, tail="drop").fit(
            *rows, batch_size=B, verify=True, verbose=0)
    assert raised.value.verification.kind == "different"
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


class Calls(keras.callbacks.Callback):
    """Every call a fit makes of its callbacks, with its logs."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_begin(self, logs=None):
        self.calls.append(("train_begin", dict(logs or {})))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("batch", batch, dict(logs or {})))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch", epoch, dict(logs or {})))

    def on_train_end(self, logs=None):
        self.calls.append(("train_end", dict(logs or {})))


def reshuffled(x, y):
    """A pipeline that shuffles (seeded, again each pass) and maps."""
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=3).map(
        lambda a, b: (2 * a, b)).batch(B)


class Preprocessing(keras.Sequential):
    """A model that preprocesses its own samples, as a KerasHub task does: the
    trainer cuts its rows into a pipeline it shuffles with TensorFlow's seeds."""

    def preprocess_samples(self, x, y=None, sample_weight=None):
        return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)


def fitted(rows, data, verify):
    """A fit of 2 epochs, with or without verify=True: the weights, History,
    callbacks' calls, each global random state's next draw and the data's next pass."""
    x, y = rows
    model = mlp(*([keras.layers.Dropout(0.3, seed=7)] if data == "dropout" else []))
    if data == "preprocessing model":
        model = Preprocessing(model.layers)
        model.compile(keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    calls = Calls()
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=K)
    if data == "reshuffled pipeline":
        dataset = reshuffled(x, y)
        fit_data, kwargs = (dataset,), {}
    else:
        dataset, fit_data, kwargs = None, (x, y), dict(batch_size=B)
    if data == "validation_split":
        kwargs["validation_split"] = 0.25
    history = trainer.fit(*fit_data, epochs=2, verbose=0, callbacks=[calls], verify=verify,
                          **kwargs)
    draws = (random.random(), np.random.random(), float(tf.random.uniform(())),
             float(keras.random.uniform(())))
    next_pass = None if dataset is None else [b[1].numpy().tolist() for b in dataset]
    return (model.get_weights(), history.history, calls.calls, draws, next_pass,
            trainer.micro_steps_in_flight)


@pytest.mark.parametrize("data", ["arrays", "reshuffled pipeline", "dropout", "validation_split",
                                  "preprocessing model"])
def test_fit_with_verify_is_the_fit_without_it_bit_for_bit(rows, data):
    """Weights, History, callbacks' calls and logs, the global random states and a
    pipeline's next order: as without verify (the pipeline's moved on an epoch
    before verify read its rows from a copy: weights 0.024 apart after two
    epochs; a preprocessing model's first fit skipped reading its first
    micro-batch after verify, so its shuffle began an order earlier)."""
    with_verify, without = fitted(rows, data, True), fitted(rows, data, False)
    weights, *rest = with_verify
    assert all(np.array_equal(a, b) for a, b in zip(weights, without[0]))
    assert rest == list(without[1:])


def test_overlapped_micro_steps_are_chosen_for_the_runs_micro_batch_not_verifys():
    """Two micro-steps overlap where one micro-batch's estimate is small: verify's
    micro-batch (a quarter of the run's) may allow it where the run's does not."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(640, 256)).astype("float32")
    y = x[:, :1]

    def trainer():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), loss="mse")
        return gaviz.AccumulationTrainer(model, accumulation_steps=K, jit_compile=False)

    verified, plain = trainer(), trainer()
    assert verified.verify(x, y, batch_size=256, micro_batch_size=64).equal
    assert verified.micro_steps_in_flight is None  # chosen again by the run
    for fitted_trainer in (verified, plain):
        fitted_trainer.fit(x[:256], y[:256], batch_size=256, verbose=0)
    assert verified.micro_steps_in_flight == plain.micro_steps_in_flight == 1
    assert verified.window_loop.micro_steps_in_flight == 1


def test_xla_and_mixed_precision_are_verified_within_their_rounding(rows):
    assert gaviz.AccumulationTrainer(mlp(), accumulation_steps=K, jit_compile=True).verify(
        *rows, batch_size=B).equal
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        result = gaviz.AccumulationTrainer(mlp(optimizer=keras.optimizers.SGD(0.05)),
                                           accumulation_steps=K).verify(*rows, batch_size=B)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert result.equal and result.rounding == "float16", result
    assert "within float16's rounding" in result.verdict()


def test_the_result_is_a_table_in_a_notebook_and_text_in_a_terminal(rows):
    result = gaviz.AccumulationTrainer(mlp(keras.layers.Dropout(0.3)), accumulation_steps=K
                                       ).verify(*rows, batch_size=B)
    page = result._repr_html_()
    assert "<table>" in page and "random layers" in page and "width:" in page
    assert "<- differs" in str(result) and "what to do:" in str(result)


def test_data_it_cannot_read_twice_is_refused_by_name(rows):
    trainer = gaviz.AccumulationTrainer(mlp(), accumulation_steps=K)
    with pytest.raises(TypeError, match="`x` must be arrays .* or a tf.data.Dataset for verify"):
        trainer.verify(iter([rows]), batch_size=B)
    with pytest.raises(ValueError, match="`micro_batch_size` must be"):
        trainer.verify(*rows, micro_batch_size=0)
    assert make_mlp  # the suite's MLP helper stays the one other tests build on


# ------------------------------------------------------------ an own loop

def own_loop(model, count_of=lambda x: tf.shape(x)[0], flush=True):
    """An own tf.GradientTape loop with gaviz.Accumulator, in the guide's form:
    ``count_of`` says what a micro-batch's loss divides by."""
    loss_fn = keras.losses.MeanSquaredError()

    def train_epoch(micro_batches, accumulation_steps):
        acc = gaviz.Accumulator(model.optimizer, model.trainable_variables, accumulation_steps)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            acc.step(tape.gradient(loss, model.trainable_variables), count=count_of(x))

        for x, y in micro_batches:
            step(x, y)
        if flush:
            acc.flush()

    return train_epoch


def test_an_own_loop_with_the_accumulator_is_verified_equal_and_put_back(rows):
    model = mlp()
    model.optimizer.build(model.trainable_variables)
    before = [np.array(v.numpy()) for v in [*model.variables, *model.optimizer.variables]]
    result = gaviz.verify_loop(own_loop(model), model, *rows, accumulation_steps=K, batch_size=B)
    assert result.equal, result
    assert result.micro_batch_size == 4 and result.logs == {}
    after = [np.array(v.numpy()) for v in [*model.variables, *model.optimizer.variables]]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("mistake", ["a constant count", "no flush"])
def test_an_own_loops_mistakes_are_found_different(rows, mistake):
    model = mlp()
    loop = own_loop(model, count_of=lambda x: 1) if mistake == "a constant count" else \
        own_loop(model, flush=False)
    result = gaviz.verify_loop(loop, model, *rows, accumulation_steps=K, batch_size=B)
    assert not result.equal and any("dense" in gap.name for gap in result.differing), result
    assert [c.name for c in result.causes] == ["unexplained"]


def attention_model(seed=4):
    """Self-attention: its key bias gets no gradient but float rounding (a softmax
    ignores what is added to every score), which Adam turns into full steps."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((6, 4))
    attended = keras.layers.MultiHeadAttention(2, 4, name="attention")(tokens, tokens)
    model = keras.Model(tokens, keras.layers.Dense(1)(keras.layers.Flatten()(attended)))
    model.compile(keras.optimizers.Adam(0.01), loss="mse")
    return model


def test_a_variable_moved_by_rounding_alone_is_judged_against_model_fits_own_gap():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(60, 6, 4)).astype("float32"), rng.normal(size=(60, 1)).astype("float32")
    result = gaviz.AccumulationTrainer(attention_model(), accumulation_steps=K).verify(
        x, y, batch_size=B)
    assert result.equal, result
    assert any("key/bias" in name for name in result.noise), result.noise
    assert "Model.fit's own gap on the same rows in another order" in result.verdict()
    assert not any("key/kernel" in name for name in result.noise)


def test_the_optimizer_state_of_a_variable_moved_by_rounding_alone_is_rounding_too():
    """A key bias judged noise: its Adam moments (rounding, and its square) are
    noise too, however far apart; a moment of another variable is judged as before."""
    from gaviz.training.verify.closeness import VariableGap
    from gaviz.training.verify.comparing import against_noise

    weights = [VariableGap("attention/key/bias", 2e-10, 1e-10, 1e-10),
               VariableGap("attention/key/kernel", 1e-9, 1e-3, 1e-7)]
    moments = [VariableGap("adam/attention_key_bias_momentum", 4e-15, 1e-15, 1e-15),
               VariableGap("adam/attention_key_kernel_momentum", 4e-15, 1e-15, 1e-15)]
    own = ([g._replace(gap=1e-10) for g in weights], [g._replace(gap=1e-16) for g in moments], {})
    weights, moments, noise = against_noise(weights, moments, own)
    assert all(g.equal for g in weights)
    assert {g.name: g.equal for g in moments} == {"adam/attention_key_bias_momentum": True,
                                                  "adam/attention_key_kernel_momentum": False}
    assert noise == ["attention/key/bias", "adam/attention_key_bias_momentum"]


MIRRORED = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np, gaviz
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
x = rng.normal(size=(120, 5)).astype("float32")
y = np.sin(x[:, :1]).astype("float32")
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), loss="mse")
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=4)
before = [w.copy() for w in model.get_weights()]
result = trainer.verify(x, y, batch_size=16)
print("RESULT", result.equal, trainer.num_replicas, result.micro_batch_size,
      all(np.array_equal(a, b) for a, b in zip(before, model.get_weights())))
"""


def test_under_mirrored_strategy_it_verifies_on_the_strategys_replicas():
    """Both runs under the strategy: gaviz's window over two replicas, Model.fit's
    big batch split across them; equal, and the model put back."""
    done = subprocess.run([sys.executable, "-c", MIRRORED], capture_output=True, text=True,
                          timeout=300)
    line = next((text for text in done.stdout.splitlines() if text.startswith("RESULT ")), None)
    assert line == "RESULT True 2 4 True", done.stdout[-2000:] + done.stderr[-3000:]


def test_kerashub_tasks_with_their_preprocessors_are_verified_equal():
    """A BERT classifier on raw strings fine-tuned with AdamW (its token tables'
    gradients sparse), a GPT-2 and a Llama 3 causal LM on text alone (their
    attention key biases, GPT-2's, move by rounding alone under Adam) and a ViT
    on raw pixels: equal, as their own fit is to the trainer in test_preprocessing."""
    pytest.importorskip("keras_hub")
    from test_preprocessing import (
        bert_classifier,
        gpt2_causal_lm,
        images,
        llama3_causal_lm,
        sentences,
        texts,
        vit_classifier,
    )
    text, labels = sentences(40)
    result = gaviz.AccumulationTrainer(
        bert_classifier(optimizer=keras.optimizers.AdamW(0.01)), accumulation_steps=2).verify(
        text, labels, batch_size=8)
    assert result.equal, result
    for make in (gpt2_causal_lm, llama3_causal_lm):
        result = gaviz.AccumulationTrainer(make(), accumulation_steps=2).verify(
            texts(40), batch_size=8)
        assert result.equal, result
    pixels, classes = images(40)
    assert gaviz.AccumulationTrainer(vit_classifier(), accumulation_steps=2).verify(
        pixels, classes, batch_size=8).equal


def test_kerashub_tasks_with_dropout_train_with_verify():
    """A tiny BERT classifier with its default dropout: equal up to random draws
    (equal with its dropout layers off, the key biases' rounding judged as
    Model.fit's own), so fit(verify=True) trains, and as fit() would have."""
    pytest.importorskip("keras_hub")
    import keras_hub
    from test_preprocessing import WORDS, sentences

    def bert():
        keras.utils.set_random_seed(0)
        vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
            keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True),
            sequence_length=12)
        backbone = keras_hub.models.BertBackbone(  # dropout: its default, 0.1
            vocabulary_size=len(vocabulary), num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=12)
        task = keras_hub.models.BertTextClassifier(backbone, num_classes=3,
                                                   preprocessor=preprocessor)
        task.compile(optimizer=keras.optimizers.AdamW(0.01),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return task

    text, labels = sentences(40)
    histories, weights = [], []
    for verify in (True, False):
        model = bert()
        histories.append(gaviz.AccumulationTrainer(model, accumulation_steps=2).fit(
            text, labels, batch_size=8, epochs=2, verify=verify, verbose=0).history)
        weights.append(model.get_weights())
    assert histories[0] == histories[1]
    assert all(np.array_equal(a, b) for a, b in zip(*weights))
    result = gaviz.AccumulationTrainer(bert(), accumulation_steps=2).verify(
        text, labels, batch_size=8)
    assert result.kind == "equal up to random draws", result


def test_a_dataset_of_micro_batches_padded_each_to_its_own_width_is_verified():
    """Rows read from micro-batches of different widths are padded to one width:
    both runs read the same arrays (a masked per-token loss ignores the padding)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, 64)
    rows = [rng.integers(1, 9, n).astype("int32") for n in lengths]
    dataset = tf.data.Dataset.from_generator(
        lambda: ((r, r % 3) for r in rows),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)),
    ).padded_batch(8)
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((None,), dtype="int32"),
                              keras.layers.Embedding(9, 4, mask_zero=True), keras.layers.Dense(3)])
    model.compile(keras.optimizers.SGD(0.3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    result = gaviz.AccumulationTrainer(model, accumulation_steps=2).verify(dataset)
    assert result.equal and result.micro_batch_size == 4, result
