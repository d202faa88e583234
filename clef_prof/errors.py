"""Errors that end a command with one clear line, and the exit codes the CLI uses."""

EXIT_INPUT = 1      # bad input: missing path, not SQLite, truncated, missing tables, bad spec
EXIT_STRICT = 2     # --strict and the capture raised warnings (argparse usage errors also exit 2)


class ClefError(Exception):
    """A user-facing failure: its message is printed as one line, without a traceback."""

    exit_code = EXIT_INPUT


class CaptureError(ClefError):
    """The capture cannot be read or lacks what the analysis needs."""


class SpecError(ClefError):
    """A stage spec is malformed or names a target that does not exist."""
