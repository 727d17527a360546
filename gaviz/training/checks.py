"""Argument checks at the trainer's boundary: each names the argument, what it
expects and what arrived (Keras's message style)."""

from __future__ import annotations

import numbers
import warnings

import keras
import numpy as np
import tensorflow as tf

TAIL_POLICIES = ("flush", "drop", "carry")
NORMALIZATIONS = ("samples", "weights", "sum")


def check_positive_int(name, value):
    return check_int_at_least(name, value, 1)


def check_int_at_least(name, value, minimum):
    # bool is an int subclass: True would silently mean 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}"
        )
    return int(value)


def check_accumulation_steps(value):
    """An int >= 1, or a callable ``epoch -> int`` (checked when it is read)."""
    if callable(value) and not isinstance(value, type):
        return value
    return check_positive_int("accumulation_steps", value)


def check_windows_per_call(value):
    if value == "auto":
        return value
    try:
        return check_positive_int("windows_per_call", value)
    except ValueError:
        raise ValueError(
            "`windows_per_call` must be an integer >= 1 or \"auto\". Received: "
            f"windows_per_call={value!r}"
        ) from None


def check_single_replica(class_name, strategy):
    """The pitfalls are teaching tools for one device: refuse several replicas."""
    if strategy.num_replicas_in_sync > 1:
        raise ValueError(
            f"`strategy` must have one replica for {class_name}: the pitfall "
            "gallery shows its mistakes on one device. Received a "
            f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas; "
            "use gaviz.AccumulationTrainer under tf.distribute."
        )


def check_backups(callbacks, keeps_sums: bool) -> None:
    """Refuses Keras's BackupAndRestore when windows outlive a graph call
    (``tail="carry"``): the carried window's sums are not in the backup, so a
    resumed run would lose it and land elsewhere than the uninterrupted one."""
    listed = callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
    if keeps_sums and any(isinstance(c, keras.callbacks.BackupAndRestore) for c in listed):
        raise ValueError(
            "`callbacks` holds a BackupAndRestore, which cannot back up the window a "
            "trainer with tail=\"carry\" keeps across epochs: after a crash the resumed run "
            "would lose it and not land on the uninterrupted run's weights. Use "
            "tail=\"flush\" (resumed runs are then exact), or no BackupAndRestore."
        )


def check_validation_freq(validation_freq):
    """An integer >= 1 (every that many epochs) or a list of epochs (from 1), as Keras takes."""
    if isinstance(validation_freq, (list, tuple)):
        return [check_positive_int("validation_freq", epoch) for epoch in validation_freq]
    return check_positive_int("validation_freq", validation_freq)


def check_epoch_ends(endless: bool, steps_per_epoch) -> None:
    """Data that repeats forever needs ``steps_per_epoch`` to end an epoch."""
    if endless and steps_per_epoch is None:
        raise ValueError(
            "`x` repeats forever (a dataset after .repeat()), so an epoch would never end: "
            "pass `steps_per_epoch`, the updates per epoch. Received: steps_per_epoch=None"
        )


def check_callbacks(on_update):
    """``on_update`` as a list of callables (None: none)."""
    if on_update is None:
        return []
    if callable(on_update):
        return [on_update]
    if isinstance(on_update, keras.callbacks.Callback):
        on_update = [on_update]
    callbacks = list(on_update)
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.Callback) and not callable(callback):
            raise TypeError(
                f"`on_update` takes functions of a gaviz Update; {type(callback).__name__} "
                "is a Keras callback: pass it as fit(..., callbacks=[...])."
            )
        if not callable(callback):
            raise TypeError(
                f"`on_update` must be a callable or a list of callables. Received an "
                f"element {callback!r}"
            )
    return callbacks


def check_strategy(strategy, model):
    """Returns the strategy to use: ``strategy`` or the one in scope.

    The model's variables must have been created under it, or the replicas
    would not share them.
    """
    if strategy is None:
        return tf.distribute.get_strategy()
    if not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            f"`strategy` must be a tf.distribute.Strategy. Received: strategy={strategy!r}"
        )
    variables = getattr(model, "variables", None) or []
    for variable in variables[:1]:
        inner = getattr(variable, "value", variable)
        if not strategy.extended.variable_created_in_scope(inner):
            raise ValueError(
                "`model` must be built under `strategy.scope()`: its variables were "
                f"created outside the strategy {type(strategy).__name__}."
            )
    return strategy


def check_model(model):
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"`model` must be a keras.Model. Received: model={model!r} "
            f"of type {type(model).__name__}"
        )
    for method, instead in _OWN_STEPS.items():
        owner = overridden(model, method)
        if owner is not None:
            raise ValueError(
                f"`model` overrides {method} ({owner}.{method}), which the trainer cannot "
                f"honour: it runs its own forward and backward pass on each micro-batch, with "
                f"the compiled loss as a sum, so yours would be silently replaced. {instead}"
            )


#: Keras's steps a model may override, and what to do instead with gaviz.
_OWN_STEPS = {
    "train_step": (
        "Keep your train_step and accumulate inside it with gaviz.Accumulator: create "
        "`self.accumulator = gaviz.Accumulator(self.optimizer, self.trainable_variables, "
        "accumulation_steps=k)` once the model is built; in train_step, call "
        "`self.accumulator.step(gradients, count)` (the gradients of the micro-batch's mean "
        "loss and the rows it averages) instead of `self.optimizer.apply(...)`; and "
        "train with `model.fit(..., callbacks=[gaviz.FlushAtEpochEnd(self.accumulator)])`. "
        "See https://github.com/gaviz/gaviz/blob/main/docs/guide/own_loop.md. To train with "
        "AccumulationTrainer instead, move what "
        "your train_step adds into compute_loss (honoured when it is a mean over the "
        "batch's rows), the model (add_loss) or its compiled loss and metrics."
    ),
}


def overridden(model, method) -> str | None:
    """The class outside Keras that overrides Keras's ``method`` on ``model``, if any."""
    for cls in type(model).__mro__:
        if method in vars(cls):
            return None if cls.__module__.startswith("keras.") else cls.__qualname__
    return None


def check_optimizer(optimizer):
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            "`optimizer` must be a keras.optimizers.Optimizer instance. "
            f"Received: optimizer={optimizer!r}"
        )
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if steps:
        raise ValueError(
            "`optimizer` must not accumulate gradients itself: gaviz does, exactly. "
            "Create it without `gradient_accumulation_steps`. "
            f"Received: optimizer.gradient_accumulation_steps={steps}"
        )


def check_one_of(name, value, options):
    """Checks that ``value`` is one of ``options`` (a tuple, or a dict's keys)."""
    if value not in options:
        raise ValueError(
            f"`{name}` must be one of {tuple(options)}. Received: {name}={value!r}"
        )
    return value


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
    from keras import tree

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
    from keras import tree

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


def check_loss(loss):
    """``loss`` (or each entry of a dict or list of them): a name, a Loss or a callable."""
    from keras import tree

    for entry in tree.flatten(loss) if loss is not None else []:
        if entry is None or isinstance(entry, keras.losses.Loss):
            continue
        if isinstance(entry, str):
            try:
                keras.losses.get(entry)
            except ValueError as error:
                raise ValueError(
                    f"`loss` must be a Keras loss name, a keras.losses.Loss or a callable "
                    f"returning per-sample losses. Received: loss={entry!r} ({error})"
                ) from None
        elif not callable(entry):
            raise TypeError(
                "`loss` must be a Keras loss name, a keras.losses.Loss or a callable "
                f"returning per-sample losses (or a dict or list of them, one per output). "
                f"Received: loss={entry!r} of type {type(entry).__name__}"
            )


def check_targets(y, y_pred, per_sample_losses):
    """Checks, on one eager micro-batch, that targets fit the model's outputs.

    Called with ``per_sample_losses=None`` before the loss is computed, then
    with the losses.

    A mismatch that broadcasts (targets (b, 3) against outputs (b, 1)) would
    train silently on the wrong numbers, so it is refused here.
    """
    y_shape, pred_shape = tuple(y.shape), tuple(y_pred.shape)
    loss_shape = None if per_sample_losses is None else tuple(per_sample_losses.shape)
    problem = None
    if y_shape[:1] != pred_shape[:1]:
        problem = "targets and model outputs have different batch sizes"
    elif loss_shape is None:
        pass
    elif not loss_shape:
        problem = "`loss` returned a scalar; it must return one loss per sample"
    elif loss_shape[0] != pred_shape[0]:
        problem = "per-sample losses do not have one entry per sample"
    elif len(y_shape) == len(pred_shape) and y_shape[1:] != pred_shape[1:] and y_shape[-1] != 1:
        problem = "targets and model outputs have different shapes"
    if problem:
        raise ValueError(
            f"{problem}. Received: targets of shape {y_shape}, model outputs of shape "
            f"{pred_shape}, per-sample losses of shape {loss_shape}. Check `dataset` "
            "and `loss`."
        )


def check_verbose(verbose):
    """0, 1, 2 or "auto" (1, as Keras): what ``fit`` prints."""
    if verbose == "auto":
        return 1
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(
            f'`verbose` must be 0, 1, 2 or "auto". Received: verbose={verbose!r}'
        )
    return int(verbose)


def check_epoch_length(micro_batches, accumulation_steps, tail):
    """An epoch shorter than one window: "drop" would never update, "carry" spans epochs."""
    if micro_batches is None or tail == "flush" or micro_batches >= accumulation_steps:
        return
    message = (
        f"An epoch has {micro_batches} micro-batches, fewer than accumulation_steps="
        f"{accumulation_steps}, so no window fills within an epoch."
    )
    if tail == "drop":
        raise ValueError(
            f"{message} With tail=\"drop\" every window would be dropped and the model "
            "would never be updated. Lower `accumulation_steps`, use smaller micro-batches, "
            'or use tail="flush".'
        )
    warnings.warn(
        f"{message} With tail=\"carry\" each window spans epochs.", UserWarning, stacklevel=4
    )
