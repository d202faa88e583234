"""The command line: one module per subcommand, `main` dispatching; the only place that parses arguments."""
from .app import main

__all__ = ["main"]
