"""The capstone's model: a small character-level language model, its exact big-batch
reference, and text sampled from it.

The loss of a window of padded lines is token-level: the sum of the per-token
losses over the window's real (unpadded) tokens, divided by how many there
are. ``Model.fit`` computes exactly that for one batch whose padding a Keras
mask hides (``Embedding(mask_zero=True)``); :func:`big_batch_reference` applies
it window by window, each window one batch, as the reference an accumulation
trainer must match.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from gaviz.course import corpus


class Sizes(NamedTuple):
    """A model's widths: a token's embedding, the filters and the number of causal
    convolutions (layer i looks 2**i characters apart, so 6 layers see 190 back)."""

    embedding: int
    filters: int
    layers: int


SMALL = Sizes(embedding=24, filters=64, layers=3)  # a CPU trains it in seconds
LARGE = Sizes(embedding=128, filters=512, layers=6)  # for a GPU


class CausalConv1D(keras.layers.Conv1D):
    """A ``Conv1D`` that sees only earlier positions and passes the padding mask on.

    Keras's ``Conv1D`` drops a mask; this one keeps it, which is right because
    a causal convolution's output at a real position reads no padding (padding
    comes after a line's last character). The loss then counts real tokens only.
    """

    def __init__(self, filters, kernel_size, **kwargs):
        kwargs.pop("padding", None)  # always causal (also when rebuilt from its config)
        super().__init__(filters, kernel_size, padding="causal", **kwargs)
        self.supports_masking = True


def make_model(sizes: Sizes = SMALL, seed: int = 0) -> keras.Model:
    """Embedding (padding masked) -> causal dilated convolutions -> Dense logits over the
    vocabulary; the same initial weights for the same ``seed``. The logits stay float32
    under a mixed precision policy."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((None,), dtype="int32"),
        keras.layers.Embedding(corpus.VOCABULARY_SIZE, sizes.embedding, mask_zero=True),
        *[CausalConv1D(sizes.filters, 4, dilation_rate=2**i, activation="relu")
          for i in range(sizes.layers)],
        keras.layers.Dense(corpus.VOCABULARY_SIZE, dtype="float32"),
    ])


def token_loss() -> keras.losses.Loss:
    """Cross-entropy of the next character; with the model's mask, a mean over real tokens."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def dense(gradients):
    """Gradients as dense tensors: the textbook big batch. An embedding's gradient arrives
    as ``IndexedSlices``, whose rows Keras's Adam treats one by one (as Model.fit and
    gaviz do); summed, they give the textbook update, which the exercise's check compares
    under SGD, where the two agree."""
    return [tf.convert_to_tensor(gradient) for gradient in gradients]


def _window_step(model, optimizer, loss):
    variables = model.trainable_variables
    optimizer.build(variables)
    spec = tf.TensorSpec((None, None), tf.int32)

    @tf.function(input_signature=[spec, spec])
    def step(inputs, targets):
        real = tf.cast(inputs != corpus.PAD, tf.float32)
        with tf.GradientTape() as tape:
            per_token = loss.call(targets, model(inputs, training=True))
            value = tf.reduce_sum(per_token * real) / tf.reduce_sum(real)
        optimizer.apply_gradients(zip(dense(tape.gradient(value, variables)), variables))
        return value

    return step


def windows(lines: corpus.Lines, effective_batch_size: int):
    """``(inputs, targets)`` of each window: ``effective_batch_size`` lines (the last window
    may hold fewer), cut to the window's longest line."""
    for start in range(0, len(lines.inputs), effective_batch_size):
        inputs = lines.inputs[start:start + effective_batch_size]
        width = int((inputs != corpus.PAD).sum(axis=1).max())
        yield inputs[:, :width], lines.targets[start:start + effective_batch_size, :width]


def big_batch_reference(model, optimizer, loss, lines: corpus.Lines,
                        effective_batch_size: int) -> list[float]:
    """Trains ``model`` one epoch, one update per window of ``effective_batch_size`` lines,
    each window one batch: update = -lr * grad(sum of the window's real-token losses /
    its real tokens). Returns each update's loss."""
    step = _window_step(model, optimizer, loss)
    return [float(step(inputs, targets)) for inputs, targets in windows(lines, effective_batch_size)]


def sample_lines(model, prompts, max_length: int = 64, temperature: float = 0.6,
                 seed: int = 0) -> list[str]:
    """Lines the model writes, one per prompt: the prompt's characters, then one sampled
    character at a time (logits / temperature; 0 takes the likeliest) until the end
    token or ``max_length`` characters."""
    if not temperature >= 0:
        raise ValueError(f"`temperature` must be >= 0. Received: temperature={temperature!r}")
    rng = np.random.default_rng(seed)
    last_logits = tf.function(lambda tokens: model(tokens)[:, -1, :],
                              input_signature=[tf.TensorSpec((1, None), tf.int32)])
    written = []
    for prompt in prompts:
        tokens = corpus.encode(prompt)[:-1]  # the start token and the prompt, no end
        while len(tokens) <= max_length:
            logits = last_logits(tf.constant([tokens], tf.int32))[0].numpy().astype("float64")
            token = _pick(logits, temperature, rng)
            if token == corpus.END:
                break
            tokens.append(token)
        written.append(corpus.decode(tokens))
    return written


def _pick(logits, temperature, rng) -> int:
    logits[: corpus.START + 1] = -np.inf  # never padding or a start token
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = (logits - logits.max()) / temperature
    probabilities = np.exp(scaled) / np.exp(scaled).sum()
    return int(rng.choice(len(probabilities), p=probabilities))
