"""ASCII stand-ins for the few glyphs outside ASCII that clef-prof's text reports use.

Reports use ─ · → — × µ ≥ and a few more. On a stream whose encoding cannot encode them
(PYTHONIOENCODING=ascii, a legacy console), printing one raised UnicodeEncodeError halfway
through a report. `fit_streams()` (the CLI's first step) gives such a stdout or stderr an error
handler that writes each character it cannot encode as its ASCII stand-in (anything else as `?`),
so the report comes out whole; a stand-in longer than its glyph (→ as `->`) may then push a
line one column past the width. $CLEF_PROF_ASCII=1 asks for the stand-ins of those glyphs, and
only those, in the table format's reports (on the terminal and in -o files alike): they are of
ambiguous East Asian width, drawn two columns wide by CJK terminals, which then overflow the
width. The table renderer (analyze.termtable) lays out the ASCII form, so lines keep their
width; paths and names keep their own characters; CSV, JSON and Markdown are left as they are.
Standard library only.
"""
from __future__ import annotations

import codecs
import os
import sys

ENV = "CLEF_PROF_ASCII"
HANDLER = "clef-prof-ascii"
ASCII_FOR = {"─": "-", "·": "|", "→": "->", "↳": ">", "—": "-", "–": "-", "×": "x", "…": "...",
             "±": "+/-", "µ": "u", "Σ": "sum", "Δ": "d", "≈": "~"}
_GLYPHS = "".join(ASCII_FOR)


_TABLE = str.maketrans(ASCII_FOR)


def ascii_text(text: str) -> str:
    """`text` with each character outside ASCII as its stand-in, or `?`."""
    return "".join(ch if ch < "\x80" else ASCII_FOR.get(ch, "?") for ch in text)


def plain(text: str) -> str:
    """`text` with clef-prof's glyphs as their stand-ins when $CLEF_PROF_ASCII asks for them;
    every other character kept."""
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
    """Whether $CLEF_PROF_ASCII asks for the glyphs' stand-ins in text reports."""
    return os.environ.get(ENV) == "1"


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
