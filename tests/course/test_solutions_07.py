"""The exercise solution of lesson 07 does what its exercise asks.

Checked against hand-worked numbers and against the rates lesson 07's
experiment uses (base rate 0.02 at micro-batch 32, k = 1, 4, 16).
"""

import importlib
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "lessons"))

lr_scaling = importlib.import_module("solutions.07_lr_scaling")


def test_scaled_learning_rate_rules():
    f = lr_scaling.scaled_learning_rate
    assert f(0.1, 32, 128) == pytest.approx(0.4)
    assert f(0.1, 32, 128, rule="linear") == pytest.approx(0.4)
    assert f(0.1, 32, 128, rule="sqrt") == pytest.approx(0.2)
    assert f(0.1, 256, 64) == pytest.approx(0.025)          # smaller batch, smaller rate
    assert f(0.1, 256, 64, rule="sqrt") == pytest.approx(0.05)
    assert f(3e-4, 512, 512, rule="sqrt") == pytest.approx(3e-4)
    for base_lr, base, effective in [(0.02, 32, 96), (1e-3, 10, 7)]:
        assert f(base_lr, base, effective, "sqrt") == pytest.approx(
            base_lr * math.sqrt(effective) / math.sqrt(base))


def test_scaled_learning_rate_rejects_bad_input():
    f = lr_scaling.scaled_learning_rate
    with pytest.raises(ValueError, match="rule"):
        f(0.1, 32, 128, rule="cubic")
    for bad in [(0.0, 32, 128), (0.1, 0, 128), (0.1, 32, 0), (-0.1, 32, 128)]:
        with pytest.raises(ValueError):
            f(*bad)


def test_the_lessons_rates():
    f = lr_scaling.scaled_learning_rate
    for k, linear, sqrt in [(1, 0.02, 0.02), (4, 0.08, 0.04), (16, 0.32, 0.08)]:
        assert f(0.02, 32, 32 * k) == pytest.approx(linear)
        assert f(0.02, 32, 32 * k, rule="sqrt") == pytest.approx(sqrt)
    # Scaling there and back is the identity, for both rules.
    for rule in lr_scaling.RULES:
        assert f(f(0.02, 32, 512, rule), 512, 32, rule) == pytest.approx(0.02)
