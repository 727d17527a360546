"""TensorFlow for gaviz: checked when first needed, and loaded quietly on request.

gaviz needs TensorFlow but does not pick its distribution: ``tensorflow`` (CPU,
and GPU on Linux with ``tensorflow[and-cuda]``), ``tensorflow-cpu`` and vendor
builds all install the same ``tensorflow`` package, and requiring one of them
would make pip install a second copy next to any other (TensorFlow Probability
and TensorFlow Datasets check at import time for the same reason). The extras
``gaviz[tensorflow]``, ``gaviz[and-cuda]`` and ``gaviz[tensorflow-cpu]`` install
one. ``import gaviz`` checks only that one is installed (``check_installed``);
the first public name that needs TensorFlow imports it and checks its version
(``import_tensorflow``).

Importing TensorFlow prints its native start-up log to the process's stderr
(file descriptor 2), most of it before its logging is initialized, so
``TF_CPP_MIN_LOG_LEVEL`` cannot hide it: a notebook shows it as a red error
box. A library should not redirect its user's file descriptors unasked, so
gaviz filters that log only after a quiet start was asked for (``import
gaviz.quiet``, as the lessons' first cells and the command line do, before
anything imports TensorFlow). Then, while TensorFlow loads and lists its
devices, descriptor 2 goes to a temporary file; afterwards every line of it
is written back to stderr except TensorFlow's informational (``I``) records
and the harmless messages of ``_KNOWN_NOISE``. Warnings, errors and Python's
own output still show. The trainer's first forward pass is filtered the same
way (a model's first float16 op logs a kernel fallback as an error on some
CPUs), and so is each ``fit``'s first graph call (where XLA, on by default for
arrays, logs its start and its first compilation). ``native_log`` keeps all of
it. Without a quiet start, gaviz touches no file descriptor and TensorFlow
prints what ``import tensorflow`` prints.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import tempfile
import warnings
from typing import Any, NamedTuple

#: The oldest TensorFlow gaviz runs on: pyproject.toml's bound, which CI tests
#: (make test-oldest, with the oldest Keras, gaviz._keras.MINIMUM_VERSION).
MINIMUM_VERSION = (2, 16, 2)

INSTALL_HELP = (
    "Install one TensorFlow distribution (version >= {minimum}) next to gaviz, for example:\n"
    "  pip install 'gaviz[tensorflow]'      # TensorFlow for CPU (and Apple silicon)\n"
    "  pip install 'gaviz[and-cuda]'        # TensorFlow with NVIDIA CUDA libraries (Linux GPU)\n"
    "  pip install 'gaviz[tensorflow-cpu]'  # the smaller CPU-only build (Linux, Windows)\n"
    "or install TensorFlow yourself: pip install 'tensorflow>={minimum}' (or a vendor build)."
)

# Messages TensorFlow prints while it loads, on a machine where nothing is
# wrong. Each is matched as a substring of a line.
_KNOWN_NOISE = (
    # absl's notice that it has no log configuration yet (printed once per native library).
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    # TensorFlow 2.15-2.17: the CUDA plugins register twice; harmless, fixed later.
    "when one has already been registered",
    "computation placer already registered",
    # A full `tensorflow` wheel on a machine without TensorRT.
    "TF-TRT Warning: Could not find TensorRT",
    # The first float16 op (mixed_float16) on a CPU without AVX-512 FP16: oneDNN
    # leaves float16 to TensorFlow's Eigen kernels; likewise int64 (a KerasHub
    # tokenizer's ids) on some AVX-512 CPUs (an AMD EPYC, 2026-11-28). Logged
    # once per type, as an error; the numbers are right. (The trainer's first
    # forward pass is filtered for it.)
    "only on platforms with AVX-512. Falling back to the default Eigen-based",
)
# A full `tensorflow` wheel on a machine without an NVIDIA driver logs the
# missing driver (an informational record), then an error when it tries to
# initialize CUDA anyway; after the first, the second tells nothing new.
_NO_DRIVER = "Could not find cuda drivers on your machine"
_CUINIT_FAILED = "failed call to cuInit"
# A log record's prefix: severity, MMDD, time (before logging is set up: 0000 and
# 00:00:<seconds since 1970>), thread, file:line]
_RECORD = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]]*\] ")

native_log = ""  # everything TensorFlow printed while gaviz filtered its log (see above)
quiet_start_requested = False  # set by ``import gaviz.quiet``: filter the native log


def filter_native_log(text: str) -> str:
    """Returns the lines of ``text`` worth showing: all but known noise.

    ``text`` is native output: log records (``I0101 12:00:00.000000 1 file.cc:1] ...``,
    whose message may go on over lines without that prefix) and anything else
    a library printed. Dropped: informational (``I``) records, lines with a
    message of ``_KNOWN_NOISE``, and the failed CUDA initialization that
    follows a "could not find cuda drivers" record. Everything else
    (warnings, errors, other output) is kept, in order.
    """
    no_driver = _NO_DRIVER in text
    kept, dropping = [], False
    for line in text.splitlines(keepends=True):
        record = _RECORD.match(line)
        if record:
            dropping = record.group(1) == "I" or (no_driver and _CUINIT_FAILED in line)
        if dropping or any(message in line for message in _KNOWN_NOISE):
            continue
        kept.append(line)
    return "".join(kept)


class _PythonStderr:
    """``sys.stderr`` while descriptor 2 is captured, in a process whose
    ``sys.stderr`` writes to descriptor 2 (a terminal, a pipe).

    Meanwhile it writes to ``real_fd``, a copy of the real descriptor 2, so
    Python's own output (warnings, tracebacks, logging) is neither held back
    nor filtered; afterwards it hands everything to the original object. (A
    logging handler created during the import keeps this object, so it must
    stay usable: TensorFlow's and absl's are.)
    """

    def __init__(self, original, real_fd):
        self._original, self._real_fd = original, real_fd

    def write(self, text):
        if self._real_fd is None:
            return self._original.write(text)
        os.write(self._real_fd, text.encode(self._original.encoding or "utf-8", "backslashreplace"))
        return len(text)

    def flush(self):
        if self._real_fd is None:
            self._original.flush()

    def release(self):
        self._real_fd = None

    def __getattr__(self, name):
        return getattr(self._original, name)


@contextlib.contextmanager
def native_log_filtered():
    """Sends file descriptor 2 to a temporary file meanwhile; writes back what matters.

    Used while TensorFlow loads, around the trainer's first forward pass
    (where a model's first float16 op runs) and around each ``fit``'s first
    graph call (where XLA compiles). All of it is kept in ``native_log``.
    Does nothing unless a quiet start was asked for (``quiet_start``).
    """
    global native_log
    if not quiet_start_requested:
        yield
        return
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep clean
        yield
        return
    python_stderr = sys.stderr
    stand_in = None
    with tempfile.TemporaryFile() as captured:
        if python_stderr is not None:
            python_stderr.flush()
            if python_stderr is sys.__stderr__:
                stand_in = sys.stderr = _PythonStderr(python_stderr, saved)
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            if stand_in is not None:
                stand_in.release()
                if sys.stderr is stand_in:
                    sys.stderr = python_stderr
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            native_log += text
            shown = filter_native_log(text)
            if shown and python_stderr is not None:
                python_stderr.write(shown)
                python_stderr.flush()


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"2.16.2"`` as ``(2, 16, 2)`` (a release candidate's suffix ignored)."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def check_installed():
    """Raises ImportError, saying how to install one, when no TensorFlow is installed."""
    if importlib.util.find_spec("tensorflow") is None:
        raise ImportError(
            "gaviz needs TensorFlow, and no TensorFlow is installed. "
            + INSTALL_HELP.format(minimum=".".join(map(str, MINIMUM_VERSION)))
        )


def import_tensorflow():
    """Imports TensorFlow (quietly after ``quiet_start``) and checks its version; returns it.

    Raises:
        ImportError: TensorFlow is not installed, or older than
            ``MINIMUM_VERSION``; the message says how to install it.
    """
    check_installed()
    loaded = "tensorflow" in sys.modules
    with native_log_filtered():
        tf = importlib.import_module("tensorflow")
        if quiet_start_requested and not loaded:
            # Finding the devices loads the CUDA plugin, which logs too. Only the
            # physical devices: the logical ones can still be configured after this.
            tf.config.list_physical_devices()
    if _version_tuple(tf.__version__) < MINIMUM_VERSION:
        minimum = ".".join(map(str, MINIMUM_VERSION))
        raise ImportError(
            f"gaviz needs TensorFlow >= {minimum} (for Keras 3). "
            f"Received: TensorFlow {tf.__version__}. " + INSTALL_HELP.format(minimum=minimum)
        )
    return tf


def quiet_start():
    """Filters TensorFlow's native log from now on, and loads TensorFlow so.

    What ``import gaviz.quiet`` runs. Too late once TensorFlow is loaded: its
    start-up log is out, and a warning says so.
    """
    global quiet_start_requested
    quiet_start_requested = True
    if "tensorflow" in sys.modules:
        warnings.warn(
            "gaviz.quiet was imported after TensorFlow, whose start-up log is already printed: "
            "import gaviz.quiet before TensorFlow or Keras to keep it off stderr.",
            stacklevel=3,
        )
    return import_tensorflow()


def dataset_caches(dataset) -> bool:
    """Whether ``dataset`` or a dataset it reads from is a ``.cache()``: each
    dataset's inputs are ``DatasetV2._inputs()`` and a cache is a
    ``CacheDataset`` (tensorflow/python/data/ops/dataset_ops.py and
    cache_op.py; tests/training/test_feeds.py checks that both are still so)."""
    stack = [dataset]
    while stack:
        dataset = stack.pop()
        if type(dataset).__name__ == "CacheDataset":
            return True
        inputs = getattr(dataset, "_inputs", None)
        stack.extend(inputs() if callable(inputs) else [])
    return False


class SlicedArrays(NamedTuple):
    """What a dataset of in-memory slices, batched, holds: its tensors (the
    element's structure, each with every row) and how it batches them."""

    tensors: Any
    batch_size: int
    drop_remainder: bool


#: The datasets :func:`sliced_arrays` reads through: prefetching and options
#: change when elements come, never which, or in what order.
_PASS_THROUGH = ("_PrefetchDataset", "PrefetchDataset", "_OptionsDataset")
_BATCHES = ("_BatchDataset", "BatchDataset", "_ParallelBatchDataset", "ParallelBatchDataset")
_SLICES = ("_TensorSliceDataset", "TensorSliceDataset")


def sliced_arrays(dataset) -> SlicedArrays | None:
    """The arrays of ``Dataset.from_tensor_slices(arrays).batch(size)`` (then
    ``prefetch`` or ``with_options`` any number of times), or None for any
    other pipeline: one that maps, filters, shuffles, repeats or reads files.

    Such a pipeline gives the same elements in the same order every pass, so
    its epochs can be cut from the arrays directly. Read from TensorFlow's
    dataset classes (tensorflow/python/data/ops: from_tensor_slices_op.py's
    ``_tensors`` and ``_structure``, batch_op.py's ``_batch_size`` and
    ``_drop_remainder``, each dataset's ``_input_dataset``); a TensorFlow
    whose classes say otherwise gets None, and its pipeline is iterated
    (tests/training/test_feeds.py checks these are still so).
    """
    import tensorflow as tf  # loaded already: the dataset is TensorFlow's

    while type(dataset).__name__ in _PASS_THROUGH:
        dataset = getattr(dataset, "_input_dataset", None)
    if type(dataset).__name__ not in _BATCHES:
        return None
    try:
        batch_size = int(dataset._batch_size.numpy())
        drop_remainder = bool(dataset._drop_remainder.numpy())
        slices = dataset._input_dataset
        if type(slices).__name__ not in _SLICES:
            return None
        specs = tf.nest.flatten(slices._structure)
        if not all(type(spec) is tf.TensorSpec for spec in specs):  # noqa: E721 (not subclasses)
            return None
        tensors = tf.nest.pack_sequence_as(slices._structure, list(slices._tensors))
    except (AttributeError, TypeError, ValueError):
        return None
    return SlicedArrays(tensors, batch_size, drop_remainder)


def unshared_copy(dataset):
    """``dataset`` made again from its graph, each of its shuffles (and
    ``Dataset.random``) with a seed generator of its own, starting from its
    seeds as a new pipeline's does; None where TensorFlow cannot serialize it.

    A ``shuffle`` that reshuffles each iteration draws each iteration's seeds
    from a seed generator held by the dataset, which every dataset made from
    it (``unbatch``, ``take``) shares: iterating one of those advances the
    dataset's next order. Serialized (``DatasetV2._as_serialized_graph``, in
    tensorflow/python/data/ops/dataset_ops.py), a shuffle's node takes that
    generator as a constant resource handle, its input ``seed_generator``;
    given a ``DummySeedGenerator`` instead, its kernel makes a generator of
    its own, as Python's ``shuffle`` does (shuffle_op.py), so iterating the
    copy leaves ``dataset``'s untouched (tests/training/test_verify_rows.py
    checks that this still holds).
    """
    import tensorflow as tf  # loaded already: the dataset is TensorFlow's
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import op_def_registry

    try:
        serialized = dataset._as_serialized_graph(
            external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE)
        graph = graph_pb2.GraphDef.FromString(serialized.numpy())
        generators = []
        for node in graph.node:
            op_def = op_def_registry.get(node.op)
            position = 0
            for arg in op_def.input_arg if op_def is not None else ():
                if arg.name == "seed_generator":
                    generators.append(f"{node.name}/unshared_seed_generator")
                    node.input[position] = generators[-1]
                position += (node.attr[arg.number_attr].i if arg.number_attr else
                             len(node.attr[arg.type_list_attr].list.type)
                             if arg.type_list_attr else 1)
        for name in generators:
            graph.node.add(name=name, op="DummySeedGenerator")
        variant = tf.raw_ops.DatasetFromGraph(graph_def=graph.SerializeToString())
        return tf.data.experimental.from_variant(variant, dataset.element_spec)
    except (AttributeError, TypeError, ValueError, tf.errors.OpError):
        return None


def global_generator():
    """TensorFlow's global ``tf.random.Generator`` if one was made, else None
    (``tf.random.get_global_generator`` would make one):
    tensorflow/python/ops/stateful_random_ops.py's ``global_generator``."""
    from tensorflow.python.ops import stateful_random_ops

    return getattr(stateful_random_ops, "global_generator", None)


def operation_seeds():
    """Where TensorFlow's sequence of eager operation seeds stands (None where
    no global seed is set): ``tf.random.set_seed`` makes ``context._rng``, a
    ``random.Random``, and each eager op or dataset given no seed of its own
    (``Dataset.shuffle(n)``) draws its seed from it
    (tensorflow/python/eager/context.py, ``_internal_operation_seed``)."""
    from tensorflow.python.eager import context

    rng = getattr(context.context(), "_rng", None)
    return None if rng is None else rng.getstate()


def set_operation_seeds(state) -> None:
    """Puts the sequence of eager operation seeds back where ``state`` (from
    :func:`operation_seeds`) says it stood."""
    from tensorflow.python.eager import context

    rng = getattr(context.context(), "_rng", None)
    if rng is not None and state is not None:
        rng.setstate(state)
