"""The cached window: a second way to make a window's gradient, for a loss
that couples a batch's rows (``cached_window``), its micro-batches kept
(``kept``), its random draws and layers' state replayed (``replay``), a
window carried into the next call (``store``), and when it is used (``choice``)."""
