"""The trainer's graph call: windows of micro-steps in one ``tf.function``
(``window_loop``), each micro-step's forward and backward pass
(``forward_backward``), where micro-batches come from inside the graph
(``sources``), how many run at once (``overlap``), and the counters and
carried window between calls (``state``)."""
