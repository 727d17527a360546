"""A window's verdict, an int32 in the graph (:meth:`WindowCycle.judge
<gaviz.training.window.window_cycle.WindowCycle.judge>`): not due, accepted (to be
applied: a loss scale may still skip it), or refused, and why
(:mod:`gaviz.training.window.refusals` says it)."""

NOT_DUE, ACCEPTED, BAD_COUNT, NOT_FINITE, UNFORESEEN_GRADIENTS = -1, 0, 1, 2, 3
#: The verdicts that refuse a due window: it is discarded, not applied.
REFUSALS = (BAD_COUNT, NOT_FINITE, UNFORESEEN_GRADIENTS)
