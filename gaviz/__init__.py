"""gaviz: learn and use exact gradient accumulation in TensorFlow 2 / Keras 3."""

from gaviz.history import History, Update
from gaviz.trainer import AccumulationTrainer

__all__ = ["AccumulationTrainer", "History", "Update"]
__version__ = "0.1.0"
