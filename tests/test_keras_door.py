"""Every private Keras name gaviz reaches is reached through gaviz/_keras.py (and
TensorFlow's through gaviz/_tensorflow.py), and is there in the installed Keras (a
Keras without one fails here, by name)."""

import ast
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
        "loss wrapper": keras.losses.MeanSquaredError(),
        "optimizer": model.optimizer,
    }


@pytest.mark.parametrize("holder", sorted(_keras.ATTRIBUTES))
def test_each_private_attribute_is_there(holder):
    held = keras_objects()[holder]
    missing = [name for name in _keras.ATTRIBUTES[holder] if not hasattr(held, name)]
    assert not missing, f"this Keras's {holder} lacks {missing}"


def test_the_moving_average_moves_by_keras_rule():
    """One move of the door is Keras's: ``average = m * average + (1 - m) * variable``,
    with m = 0 while ``iterations == 0`` (ema_per_micro_step repeats it before each
    update, as Keras's built-in gradient_accumulation_steps does)."""
    variable = keras.Variable([2.0])
    optimizer = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    optimizer.build([variable])
    _keras.move_moving_average(optimizer, [variable])  # iterations 0: a copy, 2
    optimizer.iterations.assign(1)
    variable.assign([4.0])
    _keras.move_moving_average(optimizer, [variable])  # 0.5 * 2 + 0.5 * 4
    optimizer.finalize_variable_values([variable])  # copies the average into the variable
    np.testing.assert_array_equal(variable.numpy(), [3.0])


def test_backup_and_restore_still_resumes_through_initial_epoch():
    assert "_initial_epoch" in inspect.getsource(keras.callbacks.BackupAndRestore)


DOORS = {"_keras.py", "_tensorflow.py"}
#: NamedTuple's documented API, underscored so as not to clash with field names.
NAMEDTUPLE = {"_replace", "_fields", "_asdict", "_make"}


def gaviz_modules():
    return [path for path in GAVIZ.rglob("*.py") if path.name not in DOORS]


def gaviz_private_names(paths, members_only=False):
    """The underscored names gaviz defines: attributes it stores, its functions,
    classes and methods, its variables; with ``members_only``, only what an
    object of gaviz's carries (stored attributes, methods, class members)."""
    names = set()
    for path in paths:
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not (members_only and id(node) in top):
                    names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and not members_only:
                names.add(node.id)
            elif _named_attribute(node, "setattr"):
                names.add(node.args[1].value)
    return {name for name in names if name.startswith("_")}


def _named_attribute(node, *functions):
    """Whether ``node`` is ``getattr``/``hasattr``/``setattr(obj, "<literal>", ...)``."""
    return (isinstance(node, ast.Call) and getattr(node.func, "id", None) in functions
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str))


def foreign_private_reads(path, own, members):
    """(line, name) of each underscored name ``path`` reads that gaviz does not define:
    ``obj._name``, and ``getattr(obj, "_name")`` (or hasattr, setattr) unless an object
    of gaviz's carries ``_name``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            name, known = node.attr, own
        elif _named_attribute(node, "getattr", "hasattr", "setattr"):
            name, known = node.args[1].value, members
        else:
            continue
        if name.startswith("_") and not name.startswith("__") and name not in known | NAMEDTUPLE:
            found.append((node.lineno, name))
    return found


def foreign_reads(root):
    paths = sorted(root.rglob("*.py"))
    # What the doors assign is Keras's or TensorFlow's name (``optimizer._learning_rate
    # = ...``), not gaviz's own: counted as gaviz's, a read of it elsewhere would hide.
    ours = [path for path in paths if path.name not in DOORS]
    own, members = gaviz_private_names(ours), gaviz_private_names(ours, members_only=True)
    found = {str(path.relative_to(root)): foreign_private_reads(path, own, members)
             for path in paths if path.name not in DOORS}
    return {path: names for path, names in found.items() if names}


def test_no_other_module_reads_a_private_name_of_keras_or_tensorflow():
    found = foreign_reads(GAVIZ)
    assert not found, f"private names read outside gaviz/_keras.py and gaviz/_tensorflow.py: {found}"


def test_the_door_check_sees_getattr_and_attributes(tmp_path):
    (tmp_path / "ours.py").write_text("class Ours:\n    def __init__(self):\n        self._state = 1\n")
    (tmp_path / "_keras.py").write_text(
        "def set_learning_rate_source(optimizer, source):\n"
        "    optimizer._learning_rate = source\n")
    (tmp_path / "reader.py").write_text(
        "def _compile_config(model):\n"
        "    return getattr(model, '_compile_config', None), model.extended._num_workers\n"
        "def fine(ours, point):\n"
        "    return ours._state, getattr(ours, '_state'), point._replace(x=1), _compile_config\n"
        "def leaks(inner):\n"
        "    return getattr(inner, '_learning_rate', None)\n")
    assert {path: sorted(names) for path, names in foreign_reads(tmp_path).items()} == {
        "reader.py": [(2, "_compile_config"), (2, "_num_workers"), (6, "_learning_rate")]}


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
