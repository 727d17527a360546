"""The trainer's arguments, checked at its boundary: each check names the
argument, what it expects and what arrived (Keras's message style). The data
is checked in :mod:`gaviz.training.data.data_checks`, the loss in
:mod:`gaviz.training.loss.objective`, plain values in :mod:`gaviz._arguments`."""

from __future__ import annotations

import keras
import tensorflow as tf

# The plain checks, for the parts that check arguments here.
from gaviz._arguments import check_int_at_least, check_one_of, check_positive_int  # noqa: F401
from gaviz.training.fit import optimizers


class Schedule:
    """k per epoch: ``accumulation_steps``, an int >= 1 or a callable ``epoch
    -> int`` (epochs from 1), each value checked when it is read.

    Raises:
        TypeError, ValueError: ``accumulation_steps`` (or a value it gives)
            is not an int >= 1.
    """

    def __init__(self, accumulation_steps):
        self.varies = callable(accumulation_steps) and not isinstance(accumulation_steps, type)
        self.accumulation_steps = (accumulation_steps if self.varies else
                                   check_positive_int("accumulation_steps", accumulation_steps))

    def __call__(self, epoch: int) -> int:
        """k in ``epoch`` (counted from 1)."""
        if not self.varies:
            return self.accumulation_steps
        return check_positive_int(f"accumulation_steps({epoch})", self.accumulation_steps(epoch))

    def accumulates(self) -> bool:
        """Whether a window may hold more than one micro-batch."""
        return self.varies or self.accumulation_steps > 1


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


def check_on_update(on_update):
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


def check_strategy(strategy, variables, made_under: str):
    """Returns the strategy to use: ``strategy`` or the one in scope, under
    which ``variables`` must have been created, or the replicas would not
    share them (``made_under``: how to make them so, for the message)."""
    if strategy is None:
        strategy = tf.distribute.get_strategy()
    elif not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            f"`strategy` must be a tf.distribute.Strategy. Received: strategy={strategy!r}"
        )
    for variable in list(variables)[:1]:
        # A keras.Variable holds its tf.Variable in .value (a tf.Variable's .value is a method).
        inner = variable.value if isinstance(variable, keras.Variable) else variable
        if not strategy.extended.variable_created_in_scope(inner):
            raise ValueError(f"{made_under}: its variables were created outside the strategy "
                             f"{type(strategy).__name__}.")
    return strategy


#: What check_strategy says of a trainer's model made outside its strategy.
MODEL_UNDER_STRATEGY = "`model` must be built under `strategy.scope()`"
#: What check_strategy says of an Accumulator's variables made outside its strategy.
VARIABLES_UNDER_STRATEGY = (
    "`variables` must be created under the accumulator's strategy: create the model and "
    "the Accumulator inside the strategy.scope() the model was built in, or pass strategy="
)


def check_variables(variables) -> list:
    """The variables an Accumulator's gradients are of: a non-empty list of
    ``tf.Variable`` or ``keras.Variable``."""
    variables = list(variables) if variables is not None else []
    if not variables:
        raise ValueError(
            "`variables` must list the variables the gradients are of "
            "(model.trainable_variables of a built model). Received: no variables; "
            "build the model first (model.build(input_shape), or call it on a batch)."
        )
    for v in variables:
        if not isinstance(v, (tf.Variable, keras.Variable)):
            raise TypeError(
                f"`variables` must hold tf.Variable or keras.Variable objects. "
                f"Received: {v!r} of type {type(v).__name__}"
            )
    return variables


def check_clipping_per_window(optimizer, strategy):
    """Keras clips each replica's share of a gradient before it sums them
    across replicas: not the window's gradient. Refused rather than changed
    (for an Accumulator, whose replicas each step the optimizer)."""
    clipping = optimizers.clipping(optimizer)
    if clipping and strategy.num_replicas_in_sync > 1:
        raise ValueError(
            f"`optimizer` clips gradients ({', '.join(clipping)}) under a strategy of "
            f"{strategy.num_replicas_in_sync} replicas: Keras clips each replica's share "
            "of the gradient before summing them, not the window's gradient, so the update "
            "would not be the big batch's. Clip in one replica's loop, or use "
            "gaviz.AccumulationTrainer, which clips the window's gradient."
        )


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


def check_verbose(verbose):
    """0, 1, 2 or "auto" (1, as Keras): what ``fit`` prints."""
    if verbose == "auto":
        return 1
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(
            f'`verbose` must be 0, 1, 2 or "auto". Received: verbose={verbose!r}'
        )
    return int(verbose)


def check_cached_window(strategy, exact_rule: bool) -> None:
    """The cached window runs on one replica, with the exact rule.

    Raises:
        ValueError: several replicas (Model.fit's loss sees each replica's
            contiguous share of its batch, a window's replicas a part of every
            micro-batch: no window groups its rows as Model.fit does), or a
            rule other than the exact one.
    """
    replicas = strategy.num_replicas_in_sync
    if replicas > 1:
        raise ValueError(
            f"The loss couples a batch's rows and the strategy has {replicas} replicas: "
            "Model.fit computes such a loss on each replica's contiguous share of its batch, "
            "where a window's replicas each hold a part of every micro-batch, so no window "
            "groups the rows as Model.fit does. Train it on one replica (the cached window, "
            "cached_window='auto'), or with accumulation_steps=1 under the strategy."
        )
    if not exact_rule:
        raise ValueError(
            "The loss couples a batch's rows, which the cached window trains exactly; a "
            "trainer with another `rule` sums micro-batches by that rule instead. Use the "
            "exact trainer for such a loss."
        )
