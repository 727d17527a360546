"""``fit``'s data, checked before any training: what ``Model.fit`` refuses is
refused here, by name, rather than after an epoch where Keras's code meets it."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import tree


def check_epoch_ends(endless: bool, steps_per_epoch) -> None:
    """Data that repeats forever needs ``steps_per_epoch`` to end an epoch."""
    if endless and steps_per_epoch is None:
        raise ValueError(
            "`x` repeats forever (a dataset after .repeat()), so an epoch would never end: "
            "pass `steps_per_epoch`, the updates per epoch. Received: steps_per_epoch=None"
        )


def check_dataset(dataset, model=None, name="dataset", targets=True):
    """Checks that ``dataset`` (the argument ``name``) is a tf.data.Dataset of
    ``(x, y)`` or ``(x, y, w)`` micro-batches; or, without ``targets`` (a
    model whose loss its layers add), also of inputs alone, ``x`` or ``(x,)``."""
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"`{name}` must be a tf.data.Dataset of (x, y) or (x, y, sample_weight) "
            f"micro-batches. Received: {name} of type {type(dataset).__name__}"
        )
    spec = dataset.element_spec
    paired = isinstance(spec, tuple) and len(spec) in (2, 3)
    inputs_only = not isinstance(spec, tuple) or len(spec) == 1
    if not (paired or (inputs_only and not targets)):
        forms = ("tuples (x, y) or (x, y, sample_weight)" if targets
                 else "x, (x,), (x, y) or (x, y, sample_weight)")
        raise TypeError(
            f"`{name}` elements must be {forms}. Received: element_spec={spec}"
        )
    if paired:
        x_spec, y_spec = spec[:2]
    else:
        x_spec, y_spec = spec[0] if isinstance(spec, tuple) else spec, None
    if _looks_unbatched(x_spec, y_spec, model):
        raise ValueError(
            f"`{name}` must yield micro-batches, but its elements look like single "
            f"samples (element_spec={spec}). Batch it: dataset.batch(micro_batch_size)."
        )


def check_preprocessed(dataset, model_name, targets=True):
    """Checks that a KerasHub task's preprocessor made ``(x, y)`` micro-batches
    where the loss needs targets (a classifier given no labels makes inputs alone).

    Raises:
        ValueError: the preprocessed micro-batches hold no targets.
    """
    spec = dataset.element_spec
    if targets and not (isinstance(spec, tuple) and len(spec) in (2, 3)):
        raise ValueError(
            f"`y` is required: {model_name}'s preprocessor made micro-batches of inputs "
            "alone, and the compiled loss needs targets. Pass the labels as `y` (or a "
            "dataset of (x, y)), as the task's own fit needs them. Received micro-batches "
            f"of element_spec={spec} after preprocessing."
        )


def _looks_unbatched(x_spec, y_spec, model):
    """Scalar targets, or inputs one axis short of the model's inputs."""
    targets = [] if y_spec is None else tree.flatten(y_spec)
    if any(getattr(s, "shape", None) is not None and s.shape.rank == 0 for s in targets):
        return True
    inputs = getattr(model, "inputs", None) if model is not None else None
    if not inputs:
        return False
    x_specs, model_inputs = tree.flatten(x_spec), tree.flatten(inputs)
    return len(x_specs) == len(model_inputs) and all(
        s.shape.rank is not None and s.shape.rank == len(i.shape) - 1
        for s, i in zip(x_specs, model_inputs)
    )


def check_array_dtypes(name, value) -> None:
    """Refuses numpy arrays in ``value`` (the argument ``name``, or a nest of
    arrays) of a dtype ``Model.fit`` refuses, before any training.

    Keras takes numbers, booleans and strings as a ``tf.string`` tensor or a
    1-D object array of Python ``str`` (keras/src/trainers/data_adapters/
    array_slicing.py, ``convert_to_sliceable``); a numpy ``str_`` or
    ``bytes_`` array, or any other object array, fails in its data adapter.
    The trainer's graph would take them (TensorFlow makes strings of them), so
    they would fail only where Keras's code meets them: in validation, after
    an epoch of training.

    Raises:
        ValueError: an array of such a dtype.
    """
    for path, array in tree.flatten_with_path(value) if value is not None else []:
        if not isinstance(array, np.ndarray) or _keras_takes(array):
            continue
        where = name + "".join(f"[{key!r}]" for key in path)
        hint = ""
        if array.dtype.kind in "US":
            hint = (f" Pass its strings as Model.fit takes them: tf.constant({where}), or "
                    f"{where}.astype(object) when it is 1-D.")
        raise ValueError(
            f"`{where}` must be an array of numbers, booleans or strings as Keras takes "
            "them (a tf.string tensor, or a 1-D object array of Python str): Model.fit "
            f"refuses it before training. Received: {where} of dtype {array.dtype} and "
            f"shape {array.shape}.{hint}"
        )


def _keras_takes(array) -> bool:
    if array.dtype == object:
        return array.ndim == 1 and all(isinstance(item, str) for item in array)
    try:
        keras.backend.standardize_dtype(array.dtype)
    except ValueError:
        return False
    return True
