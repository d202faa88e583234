"""ASCII stand-ins for the few glyphs outside ASCII that clef-prof's text reports use.

Reports use ─ · → — × µ ≥ and a few more. The table format's reports draw them only where a
terminal whose encoding is UTF-8 reads the report; into a pipe, a file (`-o`) or another
encoding they go as their ASCII stand-ins, so that a line that fits the width fits it in bytes
too (`wc -L`, `awk length` in the C locale, an editor's ruler) and in every encoding; the
table renderer (explore.termtable) lays out the form it prints, so lines keep their width.
$CLEF_PROF_ASCII=1 asks for the stand-ins on a UTF-8 terminal too (CJK terminals draw these
glyphs, of ambiguous East Asian width, two columns wide), =0 for the glyphs anywhere. Paths
and names keep their own characters; CSV, JSON and Markdown are left as they are. The Python
API draws the glyphs unless the variable says otherwise.

Where the glyphs are drawn on a stream whose encoding cannot encode them (CLEF_PROF_ASCII=0
with PYTHONIOENCODING=ascii; a warning on stderr), `fit_streams()` (the CLI's first step)
gives the stream an error handler that writes each character it cannot encode as its ASCII
stand-in (anything else as `?`), so the output comes out whole instead of stopping at a
UnicodeEncodeError. Standard library only.
"""
from __future__ import annotations

import codecs
import contextlib
import os
import sys

ENV = "CLEF_PROF_ASCII"
HANDLER = "clef-prof-ascii"
ASCII_FOR = {"─": "-", "·": "|", "→": "->", "↳": ">", "—": "-", "–": "-", "×": "x", "…": "...",
             "±": "+/-", "µ": "u", "Σ": "sum", "Δ": "d", "≈": "~"}
_GLYPHS = "".join(ASCII_FOR)


_TABLE = str.maketrans(ASCII_FOR)
_ascii_default = False     # the CLI's choice within report_to


def ascii_text(text: str) -> str:
    """`text` with each character outside ASCII as its stand-in, or `?`."""
    return "".join(ch if ch < "\x80" else ASCII_FOR.get(ch, "?") for ch in text)


def plain(text: str) -> str:
    """`text` with clef-prof's glyphs as their stand-ins in ASCII mode (`ascii_mode`); every
    other character kept."""
    return text.translate(_TABLE) if ascii_mode() else text


def _stand_in(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return ascii_text(err.object[err.start:err.end]), err.end


def _encodes(stream) -> bool:
    try:
        _GLYPHS.encode(getattr(stream, "encoding", None) or "utf-8")
        return True
    except (UnicodeEncodeError, LookupError):
        return False


def ascii_mode() -> bool:
    """Whether text reports use the glyphs' stand-ins: $CLEF_PROF_ASCII=1 (or any value but 0)
    yes, =0 no, else as `report_to` chose (the Python API: no)."""
    value = os.environ.get(ENV, "")
    return value != "0" if value else _ascii_default


@contextlib.contextmanager
def report_to(stream, to_file: bool):
    """Within it, text reports are for a file (`to_file`) or for `stream`: glyphs drawn only on
    a terminal whose encoding is UTF-8. The CLI runs each command in it."""
    global _ascii_default
    try:
        terminal = not to_file and stream.isatty()
    except (ValueError, OSError, AttributeError):     # closed or detached
        terminal = False
    try:
        utf8 = codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "utf-8"
    except LookupError:
        utf8 = False
    before, _ascii_default = _ascii_default, not (terminal and utf8)
    try:
        yield
    finally:
        _ascii_default = before


def fit_streams() -> None:
    """Give stdout and stderr the stand-in handler where their encoding cannot encode the glyphs
    (only what would otherwise raise changes)."""
    try:
        codecs.lookup_error(HANDLER)
    except LookupError:
        codecs.register_error(HANDLER, _stand_in)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and not _encodes(stream):
            try:
                stream.reconfigure(errors=HANDLER)
            except (ValueError, OSError):     # a closed or detached stream: left as it is
                pass
