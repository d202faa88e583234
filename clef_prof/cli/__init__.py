"""The command line: one module per subcommand, `main` dispatching; the only place that parses arguments."""
from .main import main

__all__ = ["main"]
