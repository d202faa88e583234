"""Tools that write captures: scrub (secrets out) and slice (a time window)."""
