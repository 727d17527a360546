"""Which TensorFlow distributions an environment holds, or pip would install.

Every TensorFlow distribution (tensorflow, tensorflow-cpu, tf-nightly, vendor
builds) installs the same `tensorflow` package, so an environment must hold
exactly one: a second one overwrites the first's files. Used by
tests/test_packaging.py (on pip's dry-run report) and by `make binder-check`
(on the environment it built, which has no pytest):

    python tests/one_tensorflow.py
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

# Distributions that ship the `tensorflow` package itself; not its companions
# (tensorflow-io, tensorflow-estimator, tensorboard, ...).
TENSORFLOW = re.compile(
    r"(tensorflow|tf-nightly|intel-tensorflow)"
    r"(-(cpu|gpu|intel|macos|aarch64|cpu-aws|rocm|directml))?"
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def tensorflow_distributions(names) -> list[str]:
    """The names among ``names`` that are TensorFlow distributions, sorted."""
    return sorted(canonical(n) for n in names if TENSORFLOW.fullmatch(canonical(n)))


def main() -> int:
    found = tensorflow_distributions(d.metadata["Name"] for d in metadata.distributions())
    print(f"TensorFlow distributions installed in {sys.prefix}: {', '.join(found) or 'none'}")
    return 0 if len(found) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
