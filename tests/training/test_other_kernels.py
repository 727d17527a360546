"""The exactness tests once more in a second numeric configuration: oneDNN off
and one thread, so TensorFlow's kernels add in another order than this machine's
default. A tolerance that holds on one CPU's kernels only fails here first, on
the developers' machine, not on a newcomer's other CPU (closeness.py's rule)."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: The modules that hold gaviz's weights to a big-batch reference or Model.fit.
EXACTNESS = [
    "tests/training/test_closeness.py",
    "tests/training/test_exactness.py",
    "tests/training/test_keras_fit_exact.py",
    "tests/training/test_added_loss.py",
    "tests/training/test_own_loss.py",
    "tests/training/test_accumulator.py",
    "tests/training/test_every_optimizer.py",
    "tests/training/test_coupled_loss.py",
    "tests/training/test_verification.py",
]


def test_the_exactness_tests_pass_with_onednn_off_on_one_thread():
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", GAVIZ_TEST_ONE_THREAD="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-m", "not e2e", *[m for m in EXACTNESS if (ROOT / m).exists()]],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
