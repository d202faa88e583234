"""The version and the default stage names, without imports: `clef-prof --help` formats them
without importing `clef_prof.base.config` (its dataclasses import costs 7 ms of start-up)."""

VERSION = "0.1.0"           # clef_prof.__version__; pyproject.toml's version is the same
DEFAULT_DOMAIN = "clef"
DEFAULT_BATCH = "pooler"
DEFAULT_STAGES = ("parse", "index", "transfer", "head", "encode")
