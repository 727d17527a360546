"""Helpers shared by the tests (fixtures stay in conftest.py; tests import from here)."""

import keras
import numpy as np

from gaviz.training.verify.closeness import variable_gaps


def make_mlp(seed=1, inputs=5, hidden=8, outputs=1, **dense_kwargs):
    """A small tanh MLP with seeded initial weights (no batch-dependent layers)."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(hidden, activation="tanh", **dense_kwargs),
            keras.layers.Dense(outputs, **dense_kwargs),
        ]
    )


def clone(model):
    """An identical, independent copy of a built model: same layers, same weights."""
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    return copy


def same_optimizer(optimizer):
    """A fresh optimizer with ``optimizer``'s configuration (no shared state)."""
    return type(optimizer).from_config(optimizer.get_config())


def weight_gap(model_a, model_b):
    """The largest absolute difference between two models' weights."""
    return max(
        float(np.max(np.abs(a - b))) for a, b in zip(model_a.get_weights(), model_b.get_weights())
    )


def start_of(model):
    """A copy of a model's weights before training, for ``assert_same_weights``."""
    return [np.array(w) for w in model.get_weights()]


def assert_same_weights(got, expected, start, terms, names=None):
    """Two trainings from ``start`` are equal by gaviz's one rule (``closeness``):
    each variable within float rounding of how far training moved it.

    Args:
        got, expected: models, or lists of their weights' values.
        start: the weights both began from (``start_of(model)`` before training).
        terms: the loss terms summed into one gradient of the big batch (its rows,
            or its tokens for a per-token loss).
        names: the variables' names for the message (default: ``expected``'s, if a model).
    """
    if names is None and hasattr(expected, "weights"):
        names = [v.path for v in expected.weights]
    values = [m.get_weights() if hasattr(m, "get_weights") else m for m in (got, expected)]
    gaps = variable_gaps(values[0], values[1], start, terms, names)
    unequal = [g for g in gaps if not g.equal]
    assert not unequal, "weights differ beyond float rounding: " + "; ".join(
        f"{g.name}: gap {g.gap:.3g} = {g.relative:.3g} of its movement {g.moved:.3g} "
        f"(allowed {g.allowed:.3g})" for g in unequal[:4])
    return gaps


def weights_record(got, expected, start):
    """Two trainings' weights and their start as JSON, for a process that trains
    (tf.distribute's runs, in processes of their own) to send to the test that
    judges them with ``assert_same_recorded_weights``.

    Args:
        got, expected: models, or lists of their weights' values.
        start: the weights both began from.
    """
    models = [m for m in (expected, got) if hasattr(m, "weights")]
    names = [v.path for v in models[0].weights] if models else None
    got, expected = (m.get_weights() if hasattr(m, "get_weights") else m for m in (got, expected))
    record = {key: [np.asarray(value).tolist() for value in values]
              for key, values in (("got", got), ("expected", expected), ("start", start))}
    record["dtypes"] = [str(np.asarray(value).dtype) for value in expected]
    return {**record, "names": names}


def assert_same_recorded_weights(record, terms):
    """``assert_same_weights`` on a ``weights_record`` read back from JSON."""
    got, expected, start = ([np.asarray(value, dtype) for value, dtype in
                             zip(record[key], record["dtypes"])]
                            for key in ("got", "expected", "start"))
    return assert_same_weights(got, expected, start, terms, names=record["names"])


def assert_same_history(got, expected, rtol=1e-5, atol=1e-6):
    """Two Keras-style ``history.history`` dicts: the same keys, the same per-epoch values."""
    assert set(got) == set(expected), f"keys differ: {sorted(got)} != {sorted(expected)}"
    for key in expected:
        np.testing.assert_allclose(
            np.asarray(got[key], dtype="float64"),
            np.asarray(expected[key], dtype="float64"),
            rtol=rtol,
            atol=atol,
            err_msg=f"history[{key!r}]",
        )


def make_tagger(seed=3, vocab=10, classes=4, length=6, mask_zero=True):
    """A tiny per-token classifier over int tokens (0 is padding); logits out."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((length,), dtype="int32"),
            keras.layers.Embedding(vocab, 4, mask_zero=mask_zero),
            keras.layers.Dense(6, activation="tanh"),
            keras.layers.Dense(classes),
        ]
    )


def padded_tokens(rows, seed=0, vocab=10, classes=4, length=6):
    """Right-padded token rows (about 40% padding) and per-token labels.

    Returns ``(tokens, labels)``: tokens in 1..vocab-1, 0 after each row's
    length; labels in 1..classes-1 on real tokens and 0 on padding.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, length + 1, size=rows)
    real = np.arange(length)[None, :] < lengths[:, None]
    tokens = np.where(real, rng.integers(1, vocab, size=(rows, length)), 0).astype("int32")
    labels = np.where(real, rng.integers(1, classes, size=(rows, length)), 0).astype("int32")
    return tokens, labels


#: The two roads a tf.data pipeline of micro-batches takes in fit: in-memory
#: slices, batched (``from_tensor_slices(...).batch(...)``), are cut like arrays
#: inside the graph; any other pipeline is iterated. A test that holds for both
#: takes each: the identity ``map`` sends the same micro-batches the second way.
PIPELINES = {
    "sliced": lambda dataset: dataset,
    "iterated": lambda dataset: dataset.map(lambda *element: element),
}
