"""The exact window as a piece of anyone's loop or ``train_step``:
``Accumulator`` (``accumulator``), and the Keras callback that applies its
partial window at each epoch's end (``flush_callback``)."""
