"""The trainer's optimizer, loss and metrics: given, or taken from ``model.compile``.

A Keras user compiles the model first; ``AccumulationTrainer(model,
accumulation_steps=8)`` then trains with what ``compile`` was given. Anything
passed to the trainer explicitly wins, and the model is (re)compiled with the
trainer's choices, so that ``model.optimizer`` is the optimizer the trainer
steps (``ReduceLROnPlateau``, ``ModelCheckpoint`` and ``model.save`` see it),
and ``model.evaluate``, ``model.metrics`` and Keras's loss trackers are the
ones the trainer updates.
"""

from __future__ import annotations

from typing import NamedTuple

from gaviz import _keras


class Compiled(NamedTuple):
    optimizer: object
    loss: object
    metrics: object
    loss_weights: object


def compile_for_trainer(model, strategy, optimizer=None, loss=None, metrics=None,
                        loss_weights=None, loss_required: bool = True) -> Compiled:
    """Resolves each argument (given, else the model's compile) and compiles ``model``.

    ``loss_required``: False for a model whose own ``compute_loss`` makes its
    loss, or whose layers may add it with ``add_loss`` (Keras compiles such a
    model without one too).

    Raises:
        ValueError: no optimizer or no loss, neither given nor compiled.
    """
    config = _keras.compile_arguments(model)
    chosen = Compiled(
        # model.optimizer, not the config's: compile may have wrapped it for
        # loss scaling (mixed_float16).
        optimizer if optimizer is not None else (model.optimizer if config else None),
        loss if loss is not None else config.get("loss"),
        metrics if metrics is not None else config.get("metrics"),
        loss_weights if loss_weights is not None else config.get("loss_weights"),
    )
    for name in ("optimizer", "loss") if loss_required else ("optimizer",):
        if getattr(chosen, name) is None:
            raise ValueError(
                f"`{name}` is required: pass it to AccumulationTrainer, or compile the "
                f"model first (model.compile({name}=...))"
                + (", or add it in a layer's call with add_loss" if name == "loss" else "")
                + f". Received: {name}=None and a model "
                + ("compiled without one." if config else "that is not compiled.")
            )
    if not _compiled_with(model, config, chosen):
        with strategy.scope():
            model.compile(
                optimizer=chosen.optimizer,
                loss=chosen.loss,
                loss_weights=chosen.loss_weights,
                metrics=chosen.metrics,
                weighted_metrics=config.get("weighted_metrics"),
                jit_compile=config.get("jit_compile", "auto"),
                # The trainer's optimizer, unwrapped: model.optimizer must be it.
                auto_scale_loss=False,
            )
    return chosen._replace(optimizer=model.optimizer)


def _compiled_with(model, config, chosen) -> bool:
    if not config:
        return False
    same = model.optimizer is chosen.optimizer
    for name in ("loss", "metrics", "loss_weights"):
        same = same and config.get(name) is getattr(chosen, name)
    return same
