"""A KerasHub task's preprocessing, applied as the task's own ``fit`` applies it.

A KerasHub task (``keras_hub.models.Task``, a ``PipelineModel``) is usually
trained on raw data: strings, images of any scale. Its ``fit`` and
``evaluate`` build a ``tf.data`` pipeline of batches of that raw data and map
the task's ``preprocess_samples`` over it (tokenizing, padding, making a
causal LM's targets and padding mask, rescaling pixels), so the model itself
only ever sees what its preprocessor made.

The trainer does the same with micro-batches: the raw rows are cut into
micro-batches of ``batch_size`` and each is preprocessed on its own. For a
preprocessor that works sample by sample (every KerasHub preprocessor pads to
its fixed ``sequence_length`` and converts each image on its own), a
micro-batch's preprocessed rows are the big batch's rows, so the window equals
the task's ``fit(batch_size=k * b)``. Validation and ``evaluate`` go through
the task's own ``evaluate``, which preprocesses too.

Nothing here imports KerasHub: a model that has ``preprocess_samples`` (the
``PipelineModel`` protocol) is preprocessed, unless it is a task whose
``preprocessor`` is None (then its ``preprocess_samples`` only packs what it is
given, and the trainer takes the data as it takes any model's).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras import tree


def preprocess_samples(model):
    """``model.preprocess_samples`` when ``model`` preprocesses its data, else None."""
    preprocess = getattr(model, "preprocess_samples", None)
    if not callable(preprocess):
        return None
    if hasattr(model, "preprocessor") and model.preprocessor is None:
        return None
    return preprocess


def raw_micro_batches(x, y, sample_weight, batch_size: int, shuffle: bool) -> tf.data.Dataset:
    """In-memory raw data (strings included) as micro-batches of ``batch_size``
    rows, the rows shuffled afresh every epoch when ``shuffle``.

    KerasHub's own ``fit`` makes the same dataset (``from_tensor_slices`` of
    ``(x, y, sample_weight)``, then ``batch``) but never shuffles it: Model.fit
    leaves a dataset's order alone. The trainer shuffles arrays when asked,
    as Model.fit does arrays; ``shuffle=False`` gives the task's order.
    """
    rows = keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
    dataset = tf.data.Dataset.from_tensor_slices(rows)
    if shuffle:
        dataset = dataset.shuffle(int(dataset.cardinality()), reshuffle_each_iteration=True)
    return dataset.batch(batch_size)


def apply(dataset: tf.data.Dataset, preprocess) -> tf.data.Dataset:
    """``dataset``'s micro-batches through ``preprocess``, as KerasHub maps it
    (in parallel, read ahead)."""
    return dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )


def split_rows(arrays, validation_split: float):
    """``(train, validation)``: the rows of ``arrays`` (a nest, None allowed)
    before and after ``floor(rows * (1 - validation_split))``, Keras's rule for
    ``validation_split``, by plain slicing: Keras's own split converts every
    array to a number type, which raw strings are not (KerasHub's fit keeps a
    copy of it that slices, as this does).

    Raises:
        ValueError: the split leaves no rows on one side.
    """
    present = [array for array in tree.flatten(arrays) if array is not None]
    rows = int(present[0].shape[0])
    split_at = int(math.floor(rows * (1.0 - validation_split)))
    if split_at in (0, rows):
        raise ValueError(
            f"`validation_split`={validation_split} leaves no rows on one side of the "
            f"split: `x` has {rows} rows. Give more data or another fraction."
        )

    def part(start, stop):
        return tree.map_structure(
            lambda array: None if array is None else array[start:stop], arrays
        )

    return part(0, split_at), part(split_at, rows)
