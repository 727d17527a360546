"""``fit``'s data: what it is given turned into a feed of passes (``feeds``),
checked (``data_checks``), through a KerasHub task's preprocessor
(``preprocessing``)."""
