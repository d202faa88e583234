"""Text redaction shared by record (its manifest) and scrub (exports): secret-named flags and
assignments lose their values, key-like tokens are removed, a command keeps its executable's base name.
Standard library only."""
from __future__ import annotations

import re

REMOVED = "[removed]"
NEUTRAL_PROCESS = "process"

_SECRET_WORD = r"(?:token|secret|passw|pwd|key|credential|auth|cookie|session)"
_NOT_DONE = r"(?!\[removed\])"
# a whole value that is an assignment, or an environment block
_LEADING_ASSIGN = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_.-]*=")
_NUL_ASSIGN = re.compile(r"(?:^|\x00)\s*[A-Za-z_][A-Za-z0-9_.-]*=")
# an assignment inside free text: upper-case (environment style) or secret-named, value to the next blank
_INNER_ASSIGN = re.compile(rf"(?<![\w.-])([A-Z_][A-Z0-9_]+=){_NOT_DONE}(\"[^\"]*\"|'[^']*'|[^\s\x00]+)")
_INNER_ASSIGN_SECRET = re.compile(rf"(?<![\w.-])([A-Za-z0-9_]*{_SECRET_WORD}[A-Za-z0-9_]*=){_NOT_DONE}"
                                  r"(\"[^\"]*\"|'[^']*'|[^\s\x00]+)", re.I)
# --token X, --api-key=X, -password X
_SECRET_FLAG = re.compile(rf"(?<![\w-])(--?[A-Za-z0-9_.-]*{_SECRET_WORD}[A-Za-z0-9_.-]*(?:=|[\s\x00]+)){_NOT_DONE}"
                          r"(\"[^\"]*\"|'[^']*'|[^\s\x00-]\S*)", re.I)
_KEY_TOKENS = [
    ("key-token", re.compile(r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
                             r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|xox[abposr]-[\w-]{10,}|glpat-[\w-]{20,}"
                             r"|AIza[\w-]{35}|eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]+)")),
    ("long-hex", re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{32,}(?![0-9A-Za-z])")),
    # delimited by non-word characters: runs inside identifiers (C++ mangled names) are not keys
    ("long-base64", re.compile(r"(?<![\w+/])(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])"
                               r"[A-Za-z0-9+/]{40,}={0,2}(?![\w+/=])")),
]
_EXE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


def exe_name(value) -> str:
    """The base name of a command line's executable, or a neutral name when it is not a plain name."""
    if not isinstance(value, str):
        return NEUTRAL_PROCESS
    first = value.replace("\x00", " ").strip().split(" ", 1)[0] if value.strip() else ""
    base = first.rstrip("/").rsplit("/", 1)[-1][:64]
    if not _EXE.match(base) or redact_text(base)[1]:
        return NEUTRAL_PROCESS
    return base


def redact_text(value: str) -> tuple[str, list[str]]:
    """(value with secret-looking parts removed, the rules that fired)."""
    if value == REMOVED or not value:
        return value, []
    if _LEADING_ASSIGN.match(value) or ("\x00" in value and _NUL_ASSIGN.search(value)):
        return REMOVED, ["env-block" if "\x00" in value else "assignment"]
    rules = []
    out = value
    for rule, rx in (("secret-flag", _SECRET_FLAG), ("assignment", _INNER_ASSIGN), ("assignment", _INNER_ASSIGN_SECRET)):
        new = rx.sub(lambda m: m.group(1) + REMOVED, out)
        if new != out:
            rules.append(rule)
            out = new
    for rule, rx in _KEY_TOKENS:
        new = rx.sub(REMOVED, out)
        if new != out:
            rules.append(rule)
            out = new
    return out, rules


def redact_args(argv) -> list[str]:
    """A command line with secret-looking values removed: values after secret-named flags,
    `NAME=value` assignments (values), key-like tokens."""
    out: list[str] = []
    after_flag = False
    for arg in argv:
        arg = str(arg)
        if after_flag and not arg.startswith("-"):
            out.append(REMOVED)
            after_flag = False
            continue
        after_flag = False
        m = re.match(r"^(--?[A-Za-z0-9_.-]+)(=.*)?$", arg)
        if m and re.search(_SECRET_WORD, m.group(1), re.I):
            if m.group(2) is None:
                after_flag = True
                out.append(arg)
            else:
                out.append(m.group(1) + "=" + REMOVED)
            continue
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=", arg)
        if m:
            out.append(m.group(1) + "=" + REMOVED)
            continue
        out.append(redact_text(arg)[0])
    return out
