import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest


@pytest.fixture
def regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(100, 1))).astype("float32")
    return x, y
