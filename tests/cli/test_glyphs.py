"""Reports on terminals that cannot show clef-prof's few glyphs outside ASCII (─ · → … Σ ±): the
report comes out whole, in ASCII stand-ins, instead of stopping halfway at a UnicodeEncodeError;
CLEF_PROF_ASCII=1 asks for the same on any terminal, with wrapped lines inside the width."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.glyphs import ASCII_FOR, ascii_text

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "traces" / "gpu25-pr-slice.sqlite"
MAIN, PR = ROOT / "traces" / "gpu-main-slice.sqlite", ROOT / "traces" / "gpu-pr-slice.sqlite"


def cli(*args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "CLEF_PROF_ASCII", "COLUMNS")}
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, cwd=ROOT,
                          env={**base, **env}, timeout=120)


def test_stand_ins():
    assert ascii_text("a ─ b · c → d … e Σ f ± g ✓") == "a - b | c -> d ... e sum f +/- g ?"
    assert all(ch >= "\x80" and v.isascii() and v for ch, v in ASCII_FOR.items())


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_analyze_on_a_terminal_without_the_glyphs(encoding):
    """Wide enough that nothing wraps, the report is the UTF-8 one with each glyph as its stand-in."""
    utf8 = cli("analyze", TRACE, COLUMNS="1000", PYTHONIOENCODING="utf-8")
    assert utf8.returncode == 0 and any(b > 127 for b in utf8.stdout), utf8.stderr
    p = cli("analyze", TRACE, COLUMNS="1000", PYTHONIOENCODING=encoding)
    assert p.returncode == 0 and p.stderr == utf8.stderr.decode().encode(encoding, "strict"), p.stderr[-500:]
    assert p.stdout.decode("ascii") == ascii_text(utf8.stdout.decode())


def test_ascii_asked_for_keeps_80_columns():
    """Under CLEF_PROF_ASCII=1 on a UTF-8 stream, every line is ASCII and within 80 bytes: the
    renderer wraps the ASCII form, whose → is two characters."""
    utf8 = cli("analyze", TRACE, COLUMNS="80")
    p = cli("analyze", TRACE, COLUMNS="80", CLEF_PROF_ASCII="1")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split(b"\n")
    assert p.stdout.isascii() and max(map(len, lines)) <= 80 and b"->" in p.stdout
    assert max(map(len, utf8.stdout.split(b"\n"))) > 80          # the glyphs' UTF-8 bytes
    assert len(lines) >= len(utf8.stdout.split(b"\n"))


def test_compare_and_its_warnings_on_an_ascii_terminal():
    """compare's report (main → pr, figure · unit, ±X%) and its warnings on stderr (→)."""
    p = cli("compare", "--arm", f"main={MAIN}", "--arm", f"pr={PR}", PYTHONIOENCODING="ascii", COLUMNS="100")
    assert p.returncode == 0, p.stderr[-800:]
    assert p.stdout.isascii() and p.stderr.isascii() and b"internal error" not in p.stderr
    assert b"main -> pr: host time, ms per request" in p.stdout and b"detects +/-X%" in p.stdout
    assert b"(9 -> 0 per request)" in p.stdout
