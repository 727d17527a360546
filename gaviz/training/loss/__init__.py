"""The loss as sums: the compiled loss (``objective``, on ``weighted_losses``),
the reviewed per-row losses and rows that couple (``row_losses``,
``row_means``), a model's own ``compute_loss`` and ``add_loss``
(``own_loss``, ``added_loss``), and where sparse gradients differ from
``Model.fit`` (``sparse_gradients``)."""
