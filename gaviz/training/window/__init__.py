"""A window's life, shared by the trainer and the Accumulator: its sums and
their arithmetic (``arithmetic``), the rule that varies it (``rules``), when
it is due and closes (``tail``), its cycle once its micro-batches are added
(``window_cycle``: reduce, finish, judge, apply, reset), its verdicts and how
a refusal is said (``verdicts``, ``refusals``), and where its sums live
between calls (``window_store``)."""
