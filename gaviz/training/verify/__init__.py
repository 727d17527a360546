"""Is gaviz exact on this model? ``verification`` trains both ways on the rows
``rows`` reads, puts everything back (``snapshot``), judges the runs
(``comparing``, on ``closeness``: the one rule of equal weights), finds the
cause of a gap (``probes``) and says it (``report``)."""
