"""Untrusted text (names, paths, messages) made safe for Markdown. Standard library only: the
CLI's parser imports it through compare."""
from __future__ import annotations

import re

_MD_CODE_BREAKERS = re.compile(r"[`|\\]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]#|~!])")


def md(text, code: bool = False) -> str:
    """Untrusted text (names, paths, messages) as one safe Markdown line or table cell: whitespace
    and control characters become spaces, HTML is escaped, Markdown syntax and `|` are
    backslash-escaped; with `code`, text that cannot break out of one is shown as a code span."""
    s = "".join(c if c.isprintable() else " " for c in " ".join(str(text).split()))
    if code and not _MD_CODE_BREAKERS.search(s):
        return f"`{s}`" if s else ""
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)
