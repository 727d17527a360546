"""Is gaviz exact on this model? ``verification`` trains both ways and names
the cause of a gap; ``closeness`` is the one rule of equal weights."""
