"""TensorFlow for gaviz: checked once at import.

gaviz needs TensorFlow but does not pick its distribution: ``tensorflow`` (CPU,
and GPU on Linux with ``tensorflow[and-cuda]``), ``tensorflow-cpu`` and vendor
builds all install the same ``tensorflow`` package, and requiring one of them
would make pip install a second copy next to any other (TensorFlow Probability
and TensorFlow Datasets check at import time for the same reason). The extras
``gaviz[tensorflow]``, ``gaviz[and-cuda]`` and ``gaviz[tensorflow-cpu]`` install
one.
"""

from __future__ import annotations

import importlib
import importlib.util
import re

MINIMUM_VERSION = (2, 16)  # the first TensorFlow with Keras 3

INSTALL_HELP = (
    "Install one TensorFlow distribution (version >= {minimum}) next to gaviz, for example:\n"
    "  pip install 'gaviz[tensorflow]'      # TensorFlow for CPU (and Apple silicon)\n"
    "  pip install 'gaviz[and-cuda]'        # TensorFlow with NVIDIA CUDA libraries (Linux GPU)\n"
    "  pip install 'gaviz[tensorflow-cpu]'  # the smaller CPU-only build (Linux, Windows)\n"
    "or install TensorFlow yourself: pip install 'tensorflow>={minimum}' (or a vendor build)."
)

def _version_tuple(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def import_tensorflow():
    """Imports TensorFlow and checks its version; returns the module.

    Raises:
        ImportError: TensorFlow is not installed, or older than
            ``MINIMUM_VERSION``; the message says how to install it.
    """
    minimum = ".".join(map(str, MINIMUM_VERSION))
    if importlib.util.find_spec("tensorflow") is None:
        raise ImportError(
            "gaviz needs TensorFlow, and no TensorFlow is installed. "
            + INSTALL_HELP.format(minimum=minimum)
        )
    tf = importlib.import_module("tensorflow")
    if _version_tuple(tf.__version__) < MINIMUM_VERSION:
        raise ImportError(
            f"gaviz needs TensorFlow >= {minimum} (for Keras 3). "
            f"Received: TensorFlow {tf.__version__}. " + INSTALL_HELP.format(minimum=minimum)
        )
    return tf


import_tensorflow()
