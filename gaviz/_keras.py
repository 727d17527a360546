"""The door to Keras's private names: every one gaviz uses is reached here,
beside the Keras source file it mirrors, and nowhere else.

Keras's public API does not expose what an exact accumulation trainer must
share with ``Model.fit``: the compiled loss and metrics, the loss tracker,
the data adapters, the optimizer's clipping, learning-rate schedule and
moving average. A newer (or older) Keras may rename any of them; :data:`NAMES`
and :data:`ATTRIBUTES` list them so that tests/test_keras_door.py fails by name
on a Keras that lacks one, instead of a trainer failing somewhere inside.
"""

from __future__ import annotations

import re

import keras

# keras/src/backend/common/global_state.py and keras/src/random/seed_generator.py:
# the SeedGenerator keras.random's functions draw from when given no seed.
from keras.src.backend.common.global_state import get_global_attribute, set_global_attribute

# keras/src/backend/common/masking.py: the mask a layer attached to its output,
# as Keras's losses and metrics read it (and attaching one to a tensor).
from keras.src.backend.common.masking import get_keras_mask, set_keras_mask

# keras/src/losses/losses.py: the wrapper that makes a loss function a Loss
# (compile wraps every function and name it is given in one).
from keras.src.losses.losses import LossFunctionWrapper

# keras/src/models: the models whose layers form a graph with known outputs.
from keras.src.models.functional import Functional
from keras.src.models.sequential import Sequential

# keras/src/trainers/data_adapters/__init__.py: Model.fit's choice of adapter
# (arrays, tf.data, PyDataset, generators, ...), with class_weight.
from keras.src.trainers.data_adapters import get_data_adapter

# keras/src/trainers/data_adapters/array_slicing.py: validation_split, the last
# fraction of the arrays, taken before any shuffling.
from keras.src.trainers.data_adapters.array_slicing import train_validation_split

# keras/src/trainers/data_adapters/data_adapter_utils.py: class_weight as per-row weights.
from keras.src.trainers.data_adapters.data_adapter_utils import class_weight_to_sample_weights

# keras/src/trainers/data_adapters/tf_dataset_adapter.py: class_weight mapped onto a dataset.
from keras.src.trainers.data_adapters.tf_dataset_adapter import make_class_weight_map_fn

# keras/src/trainers/trainer.py: Keras's rule for jit_compile="auto" (every
# layer supports XLA, op determinism off, no GPU on an Apple-silicon Mac).
from keras.src.trainers.trainer import model_supports_jit

#: The oldest Keras gaviz runs on (pyproject.toml's bound; CI runs it). Keras
#: 3.14 adds an activity regularizer's loss as a mean over the batch
#: (keras/src/layers/layer.py, Layer.__call__); before, as a sum, which
#: the trainer would weigh 1/k of what Model.fit does.
MINIMUM_VERSION = (3, 14, 0)


def check_version(version: str | None = None) -> None:
    """Refuses a Keras older than :data:`MINIMUM_VERSION`."""
    version = keras.__version__ if version is None else version
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    if found < MINIMUM_VERSION:
        minimum = ".".join(map(str, MINIMUM_VERSION))
        raise ImportError(
            f"gaviz needs Keras >= {minimum}: older Keras adds activity regularizers' "
            "losses as sums over the batch, which the trainer would weigh differently "
            f"from Model.fit. Received: Keras {version}. Upgrade it: "
            f"pip install 'keras>={minimum}'"
        )


#: The private functions imported above (tests check each is there).
NAMES = ("get_data_adapter", "train_validation_split", "class_weight_to_sample_weights",
         "make_class_weight_map_fn", "get_keras_mask", "set_keras_mask", "model_supports_jit",
         "LossFunctionWrapper", "get_global_attribute", "set_global_attribute")


# keras/src/trainers/trainer.py: what Trainer.compile sets on a model, and
# Trainer._symbolic_build, which builds them before the first step.

def compile_arguments(model) -> dict:
    """What ``model.compile`` was given, the objects themselves ({} for a model never
    compiled): ``get_compile_config`` would serialize them."""
    if not getattr(model, "compiled", False):
        return {}
    config = getattr(model, "_compile_config", None)
    return dict(getattr(config, "config", None) or {})


def compile_loss(model):
    """The model's ``CompileLoss`` (None when compiled without a loss)."""
    return model._compile_loss


def compile_metrics(model):
    """The model's ``CompileMetrics`` (None when compiled without metrics)."""
    return model._compile_metrics


def loss_tracker(model):
    """The ``Mean`` metric behind the model's logged ``loss``."""
    return model._loss_tracker


def symbolic_build(model, data_batch) -> None:
    """Builds the compiled loss, metrics and trackers on one batch, as ``fit`` does."""
    model._symbolic_build(data_batch=data_batch)


# keras/src/backend/tensorflow/trainer.py (fit) and
# keras/src/callbacks/backup_and_restore.py: where a resumed fit starts.

def set_initial_epoch(model, epoch) -> None:
    """What BackupAndRestore reads and writes when it resumes (None: nothing)."""
    model._initial_epoch = epoch


def initial_epoch(model):
    return getattr(model, "_initial_epoch", None)


# keras/src/trainers/compile_utils.py: CompileLoss.

def user_loss(compiled):
    """The ``loss`` that ``compile`` was given."""
    return compiled._user_loss


def flat_losses(compiled) -> list:
    """``(path, loss, weight, name)`` per output, once built."""
    return compiled._flat_losses


def build_structures(compiled) -> tuple:
    """``(y_true, y_pred)`` structures the compiled loss was built with."""
    return compiled._y_true_build_structure, compiled._y_pred_build_structure


def wrapped_function(loss):
    """``(fn, kwargs)`` of a ``LossFunctionWrapper`` (None for another Loss)."""
    if not isinstance(loss, LossFunctionWrapper):
        return None
    return loss.fn, dict(loss._fn_kwargs)


# keras/src/layers/layer.py: a layer's sublayers and the losses its last call added.

#: The models whose layers form a graph with known outputs.
GRAPH_MODELS = (Functional, Sequential)


def flatten_layers(model):
    """Every layer of ``model`` (itself included), as Keras walks them."""
    return model._flatten_layers()


def own_losses(layer) -> list:
    """The losses ``layer`` itself added in its last call (not its sublayers')."""
    return layer._get_own_losses()


# keras/src/optimizers/base_optimizer.py: clipping, and the learning rate a
# schedule gives (``_get_current_learning_rate`` calls
# ``_learning_rate(iterations)``, or ``_learning_rate()`` when callable alone).

def clip_gradients(optimizer, grads) -> list:
    """``grads`` clipped by the optimizer's ``clipnorm``, ``clipvalue``, ``global_clipnorm``."""
    return optimizer._clip_gradients(grads)


def learning_rate_source(optimizer):
    """The optimizer's learning rate, variable or schedule, as it reads it."""
    return optimizer._learning_rate


def set_learning_rate_source(optimizer, source) -> None:
    optimizer._learning_rate = source


# keras/src/optimizers/base_optimizer.py: the weights' moving average of an
# optimizer made with use_ema=True. ``_backend_apply_gradients`` moves it with
# ``_update_model_variables_moving_average(self._trainable_variables)`` on every
# call, outside the branch that applies a window of gradient_accumulation_steps.

def move_moving_average(optimizer, variables) -> None:
    """One move of ``optimizer``'s moving average towards ``variables`` (those it
    was built with, in order): ``average = m * average + (1 - m) * variable``, with
    ``m = ema_momentum``, or 0 while ``optimizer.iterations == 0``."""
    optimizer._update_model_variables_moving_average(variables)


# keras/src/random/seed_generator.py: ``global_seed_generator()`` keeps the
# generator as the global attribute "global_seed_generator" (what verify puts back).

def global_seed_generator():
    """Keras's global ``SeedGenerator`` (``keras.random``'s draws without a seed)
    if one was made, else None (``set_random_seed`` drops it; the next draw
    makes it again from the seed)."""
    return get_global_attribute("global_seed_generator")


def set_global_seed_generator(generator) -> None:
    """Makes ``generator`` (a ``SeedGenerator``, or None) Keras's global one."""
    set_global_attribute("global_seed_generator", generator)


#: Private attributes, by the Keras object that holds them: each must be on
#: such an object (tests/test_keras_door.py builds one of each and checks).
ATTRIBUTES = {
    "compiled model": ("_compile_config", "_compile_loss", "_compile_metrics", "_loss_tracker",
                       "_symbolic_build", "_flatten_layers"),
    "built CompileLoss": ("_user_loss", "_flat_losses", "_y_true_build_structure",
                          "_y_pred_build_structure"),
    "layer": ("_get_own_losses",),
    "loss wrapper": ("_fn_kwargs",),
    "optimizer": ("_clip_gradients", "_learning_rate", "_update_model_variables_moving_average"),
}
