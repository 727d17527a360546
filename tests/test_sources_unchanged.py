"""gaviz refuses to build graphs from source files that changed since their import
(gaviz._sources): AutoGraph would read other lines than Python runs."""

import keras
import numpy as np
import pytest
from helpers import make_mlp

import gaviz
from gaviz import _sources
from gaviz.training import trainer as trainer_module


def test_a_changed_file_is_named(tmp_path, monkeypatch):
    module = tmp_path / "module.py"
    module.write_text("def f():\n    return 1\n")
    monkeypatch.setattr(_sources, "_RECORDED", {})
    _sources._RECORDED[str(module)] = _sources._stamp(str(module))
    _sources.check_unchanged()  # as imported
    module.write_text("def g():\n    return 2\n\n\ndef f():\n    return 1\n")
    assert _sources.changed() == [str(module)]
    with pytest.raises(RuntimeError, match="module.py.*Restart the kernel"):
        _sources.check_unchanged()


def test_the_trainer_modules_are_recorded_at_import():
    assert trainer_module.__file__ in _sources._RECORDED
    assert _sources.changed() == []


def test_fit_refuses_to_trace_a_changed_trainer(monkeypatch):
    """As if trainer.py had been edited after the import: fit stops before tracing."""
    recorded = dict(_sources._RECORDED)
    mtime, size = recorded[trainer_module.__file__]
    recorded[trainer_module.__file__] = (mtime - 1, size)
    monkeypatch.setattr(_sources, "_RECORDED", recorded)
    trainer = gaviz.AccumulationTrainer(make_mlp(), keras.optimizers.SGD(), "mse",
                                        accumulation_steps=2)
    x, y = np.ones((8, 5), np.float32), np.ones((8, 1), np.float32)
    with pytest.raises(RuntimeError, match="trainer.py"):
        trainer.fit(x, y, batch_size=2, verbose=0)
    assert trainer.tracing_count == 0
