"""``import gaviz.quiet``: load TensorFlow without its start-up log on stderr.

Import it first, before TensorFlow or Keras::

    import gaviz.quiet  # first: loads TensorFlow without its start-up log
    import keras

TensorFlow prints a native start-up log when it loads (oneDNN, CUDA drivers
not found, CPU instructions), most of it before its logging is set up, where
``TF_CPP_MIN_LOG_LEVEL`` cannot reach it; a notebook shows it in red, like an
error. This module loads TensorFlow with file descriptor 2 sent to a temporary
file, and writes back everything but that noise: warnings, errors and Python's
own output still show, and ``gaviz._tensorflow.native_log`` keeps all of it.
The trainer's first forward pass and each ``fit``'s first graph call
(where XLA compiles) are filtered the same way. The lessons' first
cells and the command line import it; ``import gaviz`` alone redirects nothing.
"""

from gaviz import _tensorflow

_tensorflow.quiet_start()
