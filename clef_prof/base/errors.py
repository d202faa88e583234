"""Errors that end a command with one clear line, and the exit codes the CLI uses.

A message is one line whatever it quotes: a path (or any text) holding a newline or another
control character is shown with it escaped (`shown`), and `ClefError` escapes what a message
still carries (`one_line`), so that an error never splits across lines.
"""
import re

EXIT_INPUT = 1      # bad input: missing path, not SQLite, truncated, missing tables, bad spec
EXIT_STRICT = 2     # --strict and the capture raised warnings (argparse usage errors also exit 2)
EXIT_NOT_JUDGED = 3  # a gate (compare, bench, history) could not be judged (too few units): never a pass


_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_PLAIN_PATH = re.compile(r"[\w@%+=:,./~-]+")


def one_line(text: str) -> str:
    """`text` with its control characters (newlines, tabs, escapes) written as Python escapes."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def shown(path) -> str:
    """A path as an error line names it: as it is when it is plain (letters, digits, `@%+=:,./~-`),
    else in single quotes with control characters escaped, so that spaces, quotes and newlines in
    a name neither split the line nor blur where the name ends."""
    import os

    text = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else str(path)
    if _PLAIN_PATH.fullmatch(text):
        return text
    return "'" + one_line(text).replace("'", "\\'") + "'"


class ClefError(Exception):
    """A user-facing failure: its message is printed as one line, without a traceback (control
    characters escaped, see `one_line`)."""

    exit_code = EXIT_INPUT

    def __str__(self) -> str:
        return one_line(super().__str__())


class CaptureError(ClefError):
    """The capture cannot be read or lacks what the analysis needs."""


class SpecError(ClefError):
    """A stage spec is malformed or names a target that does not exist."""
