"""A toy pooler for clef-prof's injection tests: the same work twice, `plain` (no
annotation in the source, for `clef-prof inject`) and `annotated` (clef_prof.annotate.api)."""
