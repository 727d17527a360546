"""Every private Keras name gaviz reaches is reached through gaviz/_keras.py, and
is there in the installed Keras (a Keras without one fails here, by name)."""

import pathlib
import re

from gaviz import _keras

GAVIZ = pathlib.Path(_keras.__file__).parent


def test_each_private_name_is_there():
    missing = [name for name in _keras.NAMES if not callable(getattr(_keras, name, None))]
    assert not missing, f"this Keras lacks {missing}"


def test_no_other_module_imports_from_keras_src():
    others = [path.relative_to(GAVIZ) for path in GAVIZ.rglob("*.py")
              if path.name != "_keras.py" and re.search(r"keras\.src\b", path.read_text())]
    assert not others, f"modules reaching into keras.src outside gaviz/_keras.py: {others}"
