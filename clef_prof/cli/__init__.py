"""The command line: one module per subcommand, `main` dispatching; the only place that parses arguments."""
from .app import entry, main

__all__ = ["entry", "main"]
