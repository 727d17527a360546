"""``fit``'s Python side: the epochs, calls and callbacks (``fitting``), what a
run reports (``history``), validation (``validation``), the size of graph
calls (``call_size``), the arguments checked (``checks``), the model and its
window loop compiled, XLA's policy included (``compiling``), batch-dependent
layers (``batch_layers``) and what is read of an optimizer (``optimizers``)."""
