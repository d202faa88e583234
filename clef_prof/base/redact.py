"""Text redaction shared by record (its manifest) and scrub (exports): secret-named flags,
assignments, headers and key-value pairs lose their values, passwords leave URLs and command
lines, key-like tokens and private keys are removed, request ids and the user names in home
paths become stable pseudonyms, a command keeps its executable's base name.
Standard library only.

Pseudonyms, not one constant, where analysis compares values: two data-parallel ranks differ only
by their request ids, and `rid=[removed]` on both would make them replicas of one another. The
n-th distinct value of a kind in one scrub becomes `[rid-n]` (`[user-n]`): the same value, the same
pseudonym; different values, different ones; nothing of the value is kept, so the counter map,
dropped at the end, cannot be reversed.
"""
from __future__ import annotations

import re

REMOVED = "[removed]"
NEUTRAL_PROCESS = "process"

_SECRET_WORD = r"(?:token|secret|passw|pwd|key|credential|auth|cookie|session)"
# a value already removed (bare or quoted)
_NOT_DONE = r"(?![\"']?\[removed\])"
# a quoted value or one running to the next blank or NUL
_VALUE = r"(\"[^\"\x00]*\"|'[^'\x00]*'|[^\s\x00]+)"
# a whole value that is an environment-style or secret-named assignment, or an environment block
_LEADING_ASSIGN = re.compile(rf"^\s*(?:[A-Z_][A-Z0-9_]*|[A-Za-z0-9_.-]{{0,64}}(?i:{_SECRET_WORD})[A-Za-z0-9_.-]{{0,64}})=")
_NUL_ASSIGN = re.compile(r"(?:^|\x00)\s*[A-Za-z_][A-Za-z0-9_.-]*=")

# the request ids of a batch message (`rid=a,b,c`), as clef_prof.analyze.figures.ranks reads them
RID = re.compile(r"(?:^|[\s,;(])(?:rid|rids|request_ids?)\s*[=:]\s*([^\s;)]+)")
PSEUDONYM = re.compile(r"\[(?:rid|user)-[0-9]+\]")


class _AfterCommand:
    """A flag pattern applied after the first occurrence of a command only (`curl ... -u u:PW`):
    linear time, where one pattern of command, gap and flag is quadratic on a long value."""

    def __init__(self, command: str, flag: str) -> None:
        self.command, self.flag = re.compile(command), re.compile(flag)

    def sub(self, fix, text: str) -> str:
        m = self.command.search(text)
        return text if m is None else text[:m.end()] + self.flag.sub(fix, text[m.end():])


# (rule, pattern): the value is the pattern's last group; what comes before it stays
_VALUE_RULES = [
    # a private key: from BEGIN to END (or to the end of the value), or a tail of body lines ending at END
    ("private-key", re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[^\x00]*?"
                               r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|(?=\x00)|\Z)"
                               r"|(?<![A-Za-z0-9+/=\\\s])[A-Za-z0-9+/=\\\s]*-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)", re.S)),
    # Authorization: Bearer X, X-Api-Key: X, Cookie: a=b; c=d (to the end of the line or quote)
    ("header", re.compile(r"(?<![\w-])((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|x-access-token"
                          r"|private-token|x-goog-api-key|(?:set-)?cookie)"
                          r"(\s*:\s*(?:(?:bearer|basic|token|digest|negotiate|apikey)\s+)?)"
                          r"(?![^\r\n\x00\"']*\[removed\])([^\r\n\x00\"']+)", re.I)),
    # scheme://user:PASSWORD@host, redis://:PASSWORD@host
    ("url-password", re.compile(rf"(?i)\b([a-z][a-z0-9+.-]{{0,30}}://[^\s/@:\x00]*:){_NOT_DONE}([^\s/@\x00]+)(?=@)")),
    # curl -u user:PASSWORD (also --user, --proxy-user, -U; attached or =)
    ("curl-user", _AfterCommand(r"(?i)(?<![\w-])curl\b",
                                rf"(?i)(?<=[\s\x00])((?:-u|--user|--proxy-user)(?:[\s\x00]+|=)?[\"']?[^\s\x00:\"']*:)"
                                rf"{_NOT_DONE}([^\s\x00\"']+)")),
    # mysql -pPASSWORD (the password attached to -p)
    ("mysql-password", _AfterCommand(r"(?i)(?<![\w-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck"
                                     r"|mariadb|mariadb-dump|mariadb-admin)\b",
                                     rf"(?<=[\s\x00])(-p){_NOT_DONE}([^\s\x00]+)")),
    # --token X, --api-key=X, -password X, --password -X (a value may start with one dash, not two)
    ("secret-flag", re.compile(rf"(?<![\w-])(--?[A-Za-z0-9_.-]{{0,64}}{_SECRET_WORD}[A-Za-z0-9_.-]{{0,64}}(?:=|[\s\x00]+))"
                               rf"{_NOT_DONE}(?!--)(\"[^\"\x00]*\"|'[^'\x00]*'|[^\s\x00]+)", re.I)),
    # an upper-case (environment style) assignment inside free text
    ("assignment", re.compile(rf"(?<![\w.-])([A-Z_][A-Z0-9_]+=){_NOT_DONE}{_VALUE}")),
    # a secret-named assignment, blanks allowed around `=` (aws_secret_access_key = X)
    ("assignment", re.compile(rf"(?<![\w.-])([A-Za-z0-9_]{{0,64}}{_SECRET_WORD}[A-Za-z0-9_]{{0,64}}[ \t]*=(?!=)[ \t]*){_NOT_DONE}{_VALUE}",
                              re.I)),
    # "password": "X" (JSON) and password: X (YAML, a blank after the colon; C++ `::` is not one)
    ("key-value", re.compile(rf"((?P<q>[\"'])[\w.-]{{0,64}}{_SECRET_WORD}[\w.-]{{0,64}}(?P=q)\s*:\s*"
                             rf"|(?<![\w.:-])(?!(?:proxy-)?authorization:)[\w.-]{{0,64}}{_SECRET_WORD}[\w.-]{{0,64}}:(?!:)[ \t]+){_NOT_DONE}"
                             r"(\"(?:[^\"\\\x00]|\\.)*\"|'[^'\x00]*'|[^\s,}\x00]+)", re.I)),
    # a URL-encoded secret-named parameter: access_token%3DX (to the encoded & or the end)
    ("url-encoded", re.compile(rf"(?<![\w%])([\w.-]{{0,64}}{_SECRET_WORD}[\w.-]{{0,64}}%(?:25)?3D){_NOT_DONE}"
                               r"((?:(?!%(?:25)?26)[^\s&\x00\"'])+)", re.I)),
    # signed-URL parameters: Azure SAS sig=, AWS and GCS signatures and credentials
    ("signature", re.compile(rf"(?<![\w.-])((?:sig|signature|x-amz-signature|x-amz-credential|x-goog-signature"
                             rf"|x-goog-credential)=){_NOT_DONE}([^&\s\x00\"'#]+)", re.I)),
]
# the user name in a home folder: /home/NAME/, /Users/NAME/, C:\Users\NAME\
_USER_PATH = re.compile(r"(?:(?<![\w.-])home/|(?<![\w.-])Users/|(?<![\w.-])users/|\b[A-Za-z]:\\{1,2}Users\\{1,2})"
                        r"([^/\\\s\x00:\[\]\"'<>|*?]+)")
_KEY_TOKENS = [
    ("key-token", re.compile(r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{16,}|hf_(?=[A-Za-z]*[0-9])[A-Za-z0-9]{6,}(?!\w)"
                             r"|sk-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{16,}"
                             r"|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
                             r"|xox[abposre]-[\w-]{10,}|xapp-[\w-]{10,}"
                             r"|gl(?:pat|rt|dt|ptt|ft|imt|cbt|soat|oas|agent)-[\w-]{10,}|GR1348941[\w-]{16,}"
                             r"|npm_[A-Za-z0-9]{30,}|pypi-[\w-]{40,}"
                             r"|AIza[\w-]{35}|eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]+)")),
    ("long-hex", re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{32,}(?![0-9A-Za-z])")),
    # delimited by non-word characters: runs inside identifiers (C++ mangled names) are not keys
    ("long-base64", re.compile(r"(?<![\w+/])(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])"
                               r"[A-Za-z0-9+/]{40,}={0,2}(?![\w+/=])")),
]
_EXE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


class Pseudonyms:
    """Stable stand-ins within one scrub: the n-th distinct value of a kind becomes `[kind-n]`;
    a value that is already a pseudonym stays (a second scrub changes nothing)."""

    def __init__(self) -> None:
        self._map: dict[tuple[str, str], str] = {}
        self._count: dict[str, int] = {}

    def __call__(self, kind: str, value: str) -> str:
        if PSEUDONYM.fullmatch(value):
            return value
        p = self._map.get((kind, value))
        if p is None:
            n = self._count[kind] = self._count.get(kind, 0) + 1
            p = self._map[(kind, value)] = f"[{kind}-{n}]"
        return p


def exe_name(value) -> str:
    """The base name of a command line's executable, or a neutral name when it is not a plain name."""
    if not isinstance(value, str):
        return NEUTRAL_PROCESS
    first = value.replace("\x00", " ").strip().split(" ", 1)[0] if value.strip() else ""
    base = first.rstrip("/").rsplit("/", 1)[-1][:64]
    if not _EXE.match(base) or redact_text(base)[1]:
        return NEUTRAL_PROCESS
    return base


# launchers that exec the command they are given: the process nsys saw start under their name
# (record runs the server as `env -u TMPDIR SERVER...`) runs that command once they exec it
EXEC_WRAPPERS = frozenset({"env", "nice", "ionice", "taskset", "numactl", "chrt", "stdbuf", "setsid", "nohup"})


def process_name(launched, main_thread) -> str:
    """A process's name: its executable's base name (exe_name of what nsys recorded it launched),
    or, where that was a launcher that execs its command (`env`: record's wrapper), the name
    of the process's main thread, which is the exec'd program's (`python3`)."""
    name = exe_name(launched)
    if name in EXEC_WRAPPERS and isinstance(main_thread, str) and main_thread.strip():
        return exe_name(main_thread)
    return name


def redact_text(value: str, names: Pseudonyms | None = None) -> tuple[str, list[str]]:
    """(value with secret-looking parts removed and ids pseudonymised, the rules that fired, in
    order). `names` keeps pseudonyms stable across the values of one capture."""
    if value == REMOVED or not value:
        return value, []
    if "\x00" in value and _NUL_ASSIGN.search(value):
        return REMOVED, ["env-block"]
    if _LEADING_ASSIGN.match(value):
        return REMOVED, ["assignment"]
    return _parts(value, names if names is not None else Pseudonyms())


def _parts(value: str, names: Pseudonyms) -> tuple[str, list[str]]:
    """The rules that remove or replace parts of a value (every rule but the whole-value ones)."""
    rules = []

    def ids(m: re.Match) -> str:
        a, b = m.span(1)
        new = ",".join(x if x in ("", "...") else names("rid", x) for x in m.group(1).split(","))
        return m.group(0)[:a - m.start()] + new + m.group(0)[b - m.start():]

    def user(m: re.Match) -> str:
        return m.group(0)[:m.start(1) - m.start()] + names("user", m.group(1))

    def blank(m: re.Match) -> str:
        v = m.group(m.lastindex)
        fixed = v[0] + REMOVED + v[0] if len(v) > 1 and v[0] in "\"'" and v[-1] == v[0] else REMOVED
        return m.group(0)[:m.start(m.lastindex) - m.start()] + fixed + m.group(0)[m.end(m.lastindex) - m.start():]

    out = value
    for rule, rx, fix in (("request-id", RID, ids), *((r, x, blank) for r, x in _VALUE_RULES),
                          ("user-path", _USER_PATH, user), *((r, x, REMOVED) for r, x in _KEY_TOKENS)):
        new = rx.sub(fix, out)
        if new != out:
            if rule not in rules:
                rules.append(rule)
            out = new
    return out, rules


def redact_args(argv) -> list[str]:
    """A command line with secret-looking values removed: values after secret-named flags,
    `NAME=value` assignments (values), then every rule of redact_text over the whole line (its
    arguments NUL-separated, as nsys stores a command line), so that `mysql -pX` and `curl -u u:X`
    are seen with their command."""
    out: list[str] = []
    after_flag = False
    for arg in argv:
        arg = str(arg)
        if after_flag and not arg.startswith("--"):
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
        out.append(arg.replace("\x00", " "))
    return _parts("\x00".join(out), Pseudonyms())[0].split("\x00") if out else out
