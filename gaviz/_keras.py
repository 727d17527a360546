"""Keras's own data handling, reached where gaviz must: every private Keras name
gaviz uses for ``fit``'s data arguments is reached here, beside the Keras file
it mirrors, so that ``fit`` turns them into batches exactly as ``Model.fit`` does.
"""

from __future__ import annotations

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

#: Every private Keras name above (tests check each is there).
NAMES = ("get_data_adapter", "train_validation_split", "class_weight_to_sample_weights",
         "make_class_weight_map_fn")
