"""Every private Keras name gaviz reaches is reached through gaviz/_keras.py, and
is there in the installed Keras (a Keras without one fails here, by name)."""

import inspect
import pathlib
import re

import keras
import numpy as np
import pytest

from gaviz import _keras

GAVIZ = pathlib.Path(_keras.__file__).parent
PRIVATE = sorted({name for names in _keras.ATTRIBUTES.values() for name in names}
                 | {"_initial_epoch"})


def test_each_private_function_is_there():
    missing = [name for name in _keras.NAMES if not callable(getattr(_keras, name, None))]
    assert not missing, f"this Keras lacks {missing}"


def keras_objects():
    """One of each Keras object that holds a private attribute gaviz reads."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    x, y = np.zeros((2, 3), "float32"), np.zeros((2, 1), "float32")
    _keras.symbolic_build(model, (x, y))
    return {
        "compiled model": model,
        "built CompileLoss": _keras.compile_loss(model),
        "layer": model.layers[0],
        "optimizer": model.optimizer,
    }


@pytest.mark.parametrize("holder", sorted(_keras.ATTRIBUTES))
def test_each_private_attribute_is_there(holder):
    held = keras_objects()[holder]
    missing = [name for name in _keras.ATTRIBUTES[holder] if not hasattr(held, name)]
    assert not missing, f"this Keras's {holder} lacks {missing}"


def test_backup_and_restore_still_resumes_through_initial_epoch():
    assert "_initial_epoch" in inspect.getsource(keras.callbacks.BackupAndRestore)


def gaviz_modules():
    return [path for path in GAVIZ.rglob("*.py") if path.name != "_keras.py"]


def test_no_other_module_imports_from_keras_src():
    others = [path.relative_to(GAVIZ) for path in gaviz_modules()
              if re.search(r"keras\.src\b", path.read_text())]
    assert not others, f"modules reaching into keras.src outside gaviz/_keras.py: {others}"


def test_no_other_module_reads_a_private_keras_attribute():
    pattern = re.compile(r"\.(%s)\b" % "|".join(map(re.escape, PRIVATE)))
    others = {str(path.relative_to(GAVIZ)): pattern.findall(path.read_text())
              for path in gaviz_modules()}
    others = {path: names for path, names in others.items() if names}
    assert not others, f"private Keras attributes read outside gaviz/_keras.py: {others}"


def test_an_older_keras_is_refused_by_version():
    _keras.check_version()  # the installed one
    _keras.check_version("3.14.0")
    with pytest.raises(ImportError, match=r"gaviz needs Keras >= 3\.14\.0.*Received: Keras 3\.13\.2"):
        _keras.check_version("3.13.2")
