"""ASCII stand-ins for the few glyphs outside ASCII that clef-prof's text reports use.

Reports use ─ · → — × µ ≥ and a few more. On a stream whose encoding cannot encode them
(PYTHONIOENCODING=ascii or latin-1, a legacy console), printing one raised UnicodeEncodeError
halfway through a report. `fit_streams()` (the CLI's first step) gives stdout and stderr an error
handler that writes each such character as its ASCII stand-in (anything else as `?`), so the
report comes out whole. $CLEF_PROF_ASCII=1 asks for ASCII on any terminal: those glyphs are of
ambiguous East Asian width, drawn two columns wide by CJK terminals, which then overflow 80
columns. In either case the text renderer wraps the ASCII form (`ascii_mode`), so wrapped lines
keep their width. Standard library only.
"""
from __future__ import annotations

import codecs
import os
import sys

ENV = "CLEF_PROF_ASCII"
HANDLER = "clef-prof-ascii"
ASCII_FOR = {"─": "-", "·": "|", "→": "->", "↳": ">", "—": "-", "–": "-", "×": "x", "…": "...",
             "±": "+/-", "µ": "u", "Σ": "sum", "Δ": "d", "≈": "~", "≥": ">=", "≤": "<=", "á": "a"}
_GLYPHS = "".join(ASCII_FOR)


def ascii_text(text: str) -> str:
    """`text` with each character outside ASCII as its stand-in, or `?`."""
    return "".join(ch if ch < "\x80" else ASCII_FOR.get(ch, "?") for ch in text)


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
    """Whether text reports come out in ASCII: asked for, or stdout cannot encode the glyphs."""
    return os.environ.get(ENV) == "1" or not _encodes(sys.stdout)


def fit_streams() -> None:
    """Give stdout and stderr the stand-in handler where their encoding cannot encode the glyphs;
    make them ASCII with it when $CLEF_PROF_ASCII is 1."""
    try:
        codecs.lookup_error(HANDLER)
    except LookupError:
        codecs.register_error(HANDLER, _stand_in)
    force = os.environ.get(ENV) == "1"
    for stream in (sys.stdout, sys.stderr):
        if not hasattr(stream, "reconfigure"):
            continue
        if force:
            stream.reconfigure(encoding="ascii", errors=HANDLER)
        elif not _encodes(stream):
            stream.reconfigure(errors=HANDLER)
