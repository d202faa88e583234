"""clef-prof's few glyphs outside ASCII (─ · → … ±) in the table format: drawn only on a UTF-8
terminal; into a pipe, a file or another encoding the report is laid out in their ASCII
stand-ins, so that it fits the width in bytes too. CLEF_PROF_ASCII=1 asks for the stand-ins on
any terminal, =0 for the glyphs anywhere; a stream that cannot encode what is written to it
gets each glyph as its stand-in instead of stopping halfway at a UnicodeEncodeError. Every
other character and format is left alone."""
from __future__ import annotations

import ast
import io
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.base.glyphs import ASCII_FOR, HANDLER, ascii_text, fit_streams

ROOT = Path(__file__).resolve().parents[2]
# relative to ROOT, where the commands run: the report's first lines hold the path, whose width
# then does not depend on where the checkout lies
TRACE = "traces/gpu25-pr-slice.sqlite"
MAIN, PR = "traces/gpu-main-slice.sqlite", "traces/gpu-pr-slice.sqlite"
COMPARE = ("compare", "--arm", f"main={MAIN}", "--arm", f"pr={PR}")


def cli(*args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "CLEF_PROF_ASCII", "COLUMNS")}
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, cwd=ROOT,
                          env={**base, "PYTHONIOENCODING": "utf-8", **env}, timeout=120)


def on_terminal(*args, **env) -> tuple[int, bytes]:
    """Run the CLI with a pseudo-terminal as stdout (TERM=dumb: no styles; stderr to /dev/null): exit status and what
    the terminal got (its line discipline writes each newline as CR LF; given back as LF)."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "CLEF_PROF_ASCII", "COLUMNS")}
    leader, follower = pty.openpty()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen([sys.executable, "-m", "clef_prof", *map(str, args)], cwd=ROOT, stdout=follower,
                                stderr=null, env={**base, "PYTHONIOENCODING": "utf-8", "TERM": "dumb", **env})
    os.close(follower)
    out = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:                               # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return proc.wait(timeout=120), bytes(out).replace(b"\r\n", b"\n")


def widest(out: bytes) -> int:
    return max(len(line) for line in out.split(b"\n"))


def test_stand_ins():
    assert ascii_text("a ─ b · c → d … e Σ f ± g ✓ \x7f\x80") == "a - b | c -> d ... e sum f +/- g ? \x7f?"
    assert all(ch >= "\x80" and v.isascii() and v for ch, v in ASCII_FOR.items())
    with pytest.raises(UnicodeDecodeError):         # the handler is for encoding only
        fit_streams()
        b"\xff".decode("ascii", errors=HANDLER)


def test_every_glyph_in_the_code_has_a_stand_in():
    """The characters outside ASCII in clef_prof's string literals (docstrings aside; the lone
    surrogates of surrogateescape are no glyphs) are exactly those with a stand-in."""
    used = set()
    for path in (ROOT / "clef_prof").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        if path.name != "glyphs.py":
            used |= {ch for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and id(n) not in docs for ch in n.value if ch >= "\x80" and not "\ud800" <= ch <= "\udfff"}
    assert used == set(ASCII_FOR)


class Fixed(io.StringIO):
    """A text stream with an encoding of its choosing, which cannot be reconfigured."""

    def __init__(self, encoding):
        super().__init__()
        self._enc, self.changes = encoding, []

    @property
    def encoding(self):
        return self._enc


class Stream(Fixed):
    """One that can, and records what it is reconfigured to."""

    def reconfigure(self, **kw):
        self.changes.append(kw)


@pytest.mark.parametrize("encoding, reconfigurable, changes", [
    ("ascii", True, [{"errors": HANDLER}]), ("latin-1", True, [{"errors": HANDLER}]), ("utf-8", True, []),
    (None, True, []), ("no-such-codec", True, [{"errors": HANDLER}]), ("ascii", False, [])])
def test_fit_streams_changes_only_what_would_raise(monkeypatch, encoding, reconfigurable, changes):
    """Only a stream that cannot encode the glyphs gets the handler; one without an encoding
    (a StringIO) counts as UTF-8; one that cannot be reconfigured is left alone."""
    for name in ("stdout", "stderr"):
        monkeypatch.setattr(sys, name, (Stream if reconfigurable else Fixed)(encoding))
    fit_streams()
    assert [getattr(sys, n).changes for n in ("stdout", "stderr")] == [changes, changes]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_glyphs_asked_for_on_a_terminal_without_them(encoding):
    """With the glyphs asked for (=0) and wide enough that nothing wraps, the report is the UTF-8
    one with each character the encoding cannot encode as its stand-in (latin-1 keeps its own ·
    and ×)."""
    utf8 = cli("analyze", TRACE, COLUMNS="1000", CLEF_PROF_ASCII="0")
    assert utf8.returncode == 0 and any(b > 127 for b in utf8.stdout), utf8.stderr
    p = cli("analyze", TRACE, COLUMNS="1000", PYTHONIOENCODING=encoding, CLEF_PROF_ASCII="0")
    assert p.returncode == 0 and b"internal error" not in p.stderr, p.stderr[-500:]
    want = "".join(ch if ch.encode(encoding, "ignore") else ascii_text(ch) for ch in utf8.stdout.decode())
    assert p.stdout.decode(encoding) == want


def test_compare_and_its_warnings_on_an_ascii_terminal():
    """compare's report (main → pr, figure · unit, ±X%) and its warnings on stderr."""
    p = cli(*COMPARE, PYTHONIOENCODING="ascii", COLUMNS="100")
    assert p.returncode == 0, p.stderr[-800:]
    assert p.stdout.isascii() and p.stderr.isascii() and b"internal error" not in p.stderr
    assert b"main -> pr: host time, ms per request" in p.stdout and b"detects +/-X%" in p.stdout
    assert b"(9 -> 0 per request)" in p.stdout


@pytest.mark.parametrize("args", [("analyze", TRACE), ("analyze", TRACE, "--wide"), COMPARE, (*COMPARE, "--wide")],
                         ids=["analyze", "analyze-wide", "compare", "compare-wide"])
@pytest.mark.parametrize("cols", [40, 60, 79, 100])
@pytest.mark.parametrize("asked", [True, False], ids=["asked", "piped"])
def test_stand_ins_keep_the_width(args, cols, asked):
    """Piped, or under CLEF_PROF_ASCII=1, every line is ASCII and, counted in bytes, no wider
    than the report with the glyphs counted in characters (which fits the width unless one word
    is wider): tables and paragraphs are laid out in the stand-ins, whose → is two characters."""
    utf8 = cli(*args, COLUMNS=str(cols), CLEF_PROF_ASCII="0")
    p = cli(*args, COLUMNS=str(cols), **({"CLEF_PROF_ASCII": "1"} if asked else {}))
    assert p.returncode == 0 == utf8.returncode, p.stderr
    assert p.stdout.isascii() and any(b > 127 for b in utf8.stdout)
    assert widest(p.stdout) <= max(len(line) for line in utf8.stdout.decode().split("\n"))
    if args[0] == "analyze" and cols >= 60:      # narrower, the capture's path is one word wider
        assert widest(p.stdout) <= cols
    if cols == 79:
        assert widest(utf8.stdout) > cols          # in bytes, the glyphs' UTF-8 overflows


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_glyphs_by_where_the_report_goes(tmp_path):
    """On a UTF-8 terminal the report draws the glyphs, and is the piped report once they are
    mapped to their stand-ins (wide enough that nothing wraps); on a terminal of another encoding,
    under CLEF_PROF_ASCII=1, or written to a file with -o from a terminal, it is the piped report."""
    piped = cli("analyze", TRACE, COLUMNS="1000")
    assert piped.returncode == 0 and piped.stdout.isascii() and b" -> fix:" in piped.stdout
    rc, drawn = on_terminal("analyze", TRACE, COLUMNS="1000")
    assert rc == 0 and "→ fix:" in drawn.decode()
    assert ascii_text(drawn.decode()).encode() == piped.stdout
    for env in ({"PYTHONIOENCODING": "latin-1"}, {"CLEF_PROF_ASCII": "1"}):
        rc, out = on_terminal("analyze", TRACE, COLUMNS="1000", **env)
        assert (rc, out) == (0, piped.stdout), env
    rc, out = on_terminal("analyze", TRACE, "-o", tmp_path / "r.txt", COLUMNS="1000")
    assert (rc, out) == (0, b"") and (tmp_path / "r.txt").read_bytes() == piped.stdout


def test_ascii_asked_for_keeps_names_and_other_formats(tmp_path):
    """A capture under a folder named in Japanese: the table's header keeps the path, and CSV and
    JSON are byte for byte what they are without the variable."""
    folder = tmp_path / "データ"
    folder.mkdir()
    cap = shutil.copy(ROOT / MAIN, folder / "c.sqlite")
    table = cli("analyze", cap, CLEF_PROF_ASCII="1")
    assert table.returncode == 0 and str(cap).encode() in table.stdout
    for fmt in ("csv", "json"):
        a, b = cli("analyze", cap, "-f", fmt), cli("analyze", cap, "-f", fmt, CLEF_PROF_ASCII="1")
        assert a.returncode == 0 and a.stdout == b.stdout
        assert ("データ".encode() if fmt == "csv" else b"\\u30c7\\u30fc\\u30bf") in a.stdout
