"""What the trainer compiles: the model, with its optimizer, loss and metrics
(given, or taken from ``model.compile``), and its window loop, with XLA or not.

A Keras user compiles the model first; ``AccumulationTrainer(model,
accumulation_steps=8)`` then trains with what ``compile`` was given. Anything
passed to the trainer explicitly wins, and the model is (re)compiled with the
trainer's choices, so that ``model.optimizer`` is the optimizer the trainer
steps (``ReduceLROnPlateau``, ``ModelCheckpoint`` and ``model.save`` see it),
and ``model.evaluate``, ``model.metrics`` and Keras's loss trackers are the
ones the trainer updates.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

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


# ---------------------------------------------------------------- XLA

#: How XLA compiles a loop (``jit_compile``): not at all, each micro-step,
#: or the whole call on arrays (micro-steps, updates and the window loop).
class XlaMode(NamedTuple):
    """What XLA compiles in one of :data:`XLA_MODES`."""

    whole_call: bool  #: each graph call on arrays, as one program
    micro_steps: bool  #: each micro-step (of a dataset, and of arrays unless whole)
    says: str  #: the mode in words, for the log


#: ``jit_compile="auto"`` (mode ``"arrays"``) runs plain graphs until the
#: trainer has run this many micro-steps, and compiles the whole call on
#: arrays from the next pass on: a short run does not pay XLA's compile,
#: which on the dispatch benchmark's MLP cost as much as about this many
#: micro-steps save (1.2 s against 0.14 ms each, 2026-11-27, TensorFlow 2.21.0,
#: 2 CPU cores). A count, not a time, so that a run's numbers do not depend
#: on the machine's speed.
AUTO_XLA_AFTER_MICRO_STEPS = 8192

XLA_MODES = {
    "off": XlaMode(False, False, "off (plain TensorFlow graphs)"),
    "per_micro_batch": XlaMode(False, True, "compiles each micro-step"),
    "whole_call": XlaMode(True, True, "compiles each graph call on arrays whole, and each "
                                      "micro-step of a dataset"),
    "arrays": XlaMode(True, False, "compiles each graph call on arrays whole once the "
                                   f"trainer has run {AUTO_XLA_AFTER_MICRO_STEPS} "
                                   "micro-steps (before, and a dataset's micro-steps: no XLA)"),
}


#: Layers whose gradients XLA's CPU backend runs tens of times slower inside
#: a loop than outside one (a known XLA issue, jax-ml/jax#12868: inside a
#: loop body a convolution can get a layout its fast kernel does not take).
#: Measured here: a small CNN's micro-step 2.4 s in the window loop, 0.05 s alone.
_SLOW_IN_A_CPU_XLA_LOOP = (
    keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
    keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose,
    keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D,
    keras.layers.SeparableConv1D, keras.layers.SeparableConv2D,
)


#: ``jit_compile="auto"`` compiles the whole call only for a model whose
#: trainable weights take at most this many bytes. XLA's program holds more
#: copies of the weights at its peak than the plain graph does (a 9 MiB dense
#: model, micro-batch 32, k = 8: 2.7x the weights' bytes over a plain step of
#: batch 32, against 1.1x without XLA; benchmarks/memory_auto_xla.py), and it
#: pays most where a model is small and dispatch, not arithmetic, is what a
#: window costs.
AUTO_XLA_MAX_WEIGHT_BYTES = 16 * 2**20


def weight_bytes(model) -> int:
    """Bytes of ``model``'s trainable weights (0 before it is built)."""
    return sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size
               for v in model.trainable_variables)


def xla_mode(model, jit_compile: bool | str, gathers: bool = False) -> str:
    """How XLA compiles ``model``'s window loop: ``"off"`` without
    ``jit_compile``; ``"whole_call"`` on arrays; ``"per_micro_batch"`` (with a
    warning) where XLA would slow the whole loop down: convolutions on a CPU;
    ``"per_micro_batch"`` too where a window ``gathers`` rows (an Embedding's
    sparse gradient, a cached window's micro-batches), a number XLA would need
    to know in advance (``"auto"``: ``"off"``, as for a dataset's micro-steps).

    ``"auto"`` is ``"arrays"`` (the whole call on arrays, as
    ``"whole_call"``, once the trainer has run
    :data:`AUTO_XLA_AFTER_MICRO_STEPS` micro-steps in plain graphs, and a
    dataset's micro-steps left to TensorFlow) where
    every layer supports XLA (Keras's ``model_supports_jit``), XLA is not
    slower on the device (no convolution on a CPU) and the trainable weights
    take at most :data:`AUTO_XLA_MAX_WEIGHT_BYTES`, ``"off"`` otherwise. A
    dataset's micro-steps are not compiled: each is then an XLA launch inside
    TensorFlow's loop, which measured slower than none (the dispatch
    benchmark's MLP on its pipeline: 143 ms an epoch against 110 ms,
    2026-11-27, TensorFlow 2.21.0, 2 CPU cores).
    """
    if jit_compile == "auto":
        fast = _keras.model_supports_jit(model) and not _slow_in_a_cpu_xla_loop(model)
        small = weight_bytes(model) <= AUTO_XLA_MAX_WEIGHT_BYTES
        return "arrays" if fast and small and not gathers else "off"
    if not jit_compile:
        return "off"
    if gathers:
        return "per_micro_batch"
    slow = _slow_in_a_cpu_xla_loop(model)
    if slow:
        _warn_micro_steps_compiled(slow)
        return "per_micro_batch"
    return "whole_call"


def _slow_in_a_cpu_xla_loop(model) -> list[str]:
    """The kinds of ``model``'s layers that compiling the window loop with XLA
    would slow down: convolutions, when TensorFlow sees no GPU."""
    if tf.config.list_logical_devices("GPU"):
        return []
    return sorted({type(layer).__name__ for layer in _keras.flatten_layers(model)
                   if isinstance(layer, _SLOW_IN_A_CPU_XLA_LOOP)})


def _warn_micro_steps_compiled(slow_layers):
    warnings.warn(
        f"jit_compile=True on a CPU: XLA runs the gradients of {', '.join(slow_layers)} "
        "layers tens of times slower inside a loop than alone (a known XLA issue, "
        "jax-ml/jax#12868), so gaviz compiles each micro-step with XLA, not the whole "
        "window loop. The numbers are the same either way.",
        stacklevel=5,  # the line that made the trainer
    )
