"""The C reader against the others on a whole analysis, its own refusals (one read-only
statement; SQLite's messages as one line), and a read that never ends (a hostile export can make
a table a view that never ends) stopped by Ctrl-C on the caller's thread and by closing the
stream on reader threads."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from clef_prof.analyze import export as export_module
from clef_prof.analyze.export import Export
from clef_prof.errors import CaptureError

INFINITE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r WHERE x < 0"


def _export(tmp_path):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    con.execute("INSERT INTO t VALUES (7, 'x')")
    con.commit()
    con.close()
    return path


@pytest.mark.native
@pytest.mark.parametrize("sql, why", [
    ("SELECT a FROM t; DELETE FROM t", "not one read-only statement"),
    ("SELECT a FROM t; SELECT a FROM t", "not one read-only statement"),
    ("PRAGMA journal_mode = wal", "not one read-only statement"),
    ("SELECT a FROM t WHERE b = '" + "é" * 400, "unrecognized token"),     # cut inside a character
    ("SELECT a FROM t\0 garbage", "embedded null"),
], ids=["two statements", "a second select", "a pragma that writes", "long message", "NUL"])
def test_the_c_reader_refuses_in_one_line(tmp_path, monkeypatch, sql, why):
    monkeypatch.setattr(export_module, "READER", "native")
    with Export.open(str(_export(tmp_path))) as cap:
        with pytest.raises(CaptureError, match=why) as err:
            cap.read(sql, ["a"], {"a": "str"} if "PRAGMA" in sql else None)
        assert "\n" not in str(err.value)
        assert cap.read("SELECT a FROM t; -- a comment\n;", ["a"])["a"].tolist() == [7]


@pytest.mark.parametrize("reader", [pytest.param("native", marks=pytest.mark.native), "sqlite"])
def test_a_read_that_never_ends_can_be_stopped(tmp_path, reader):
    """In a fresh process, so that a hang fails the test instead of stalling the suite. (An ADBC
    read cannot be stopped: it finishes its window.)"""
    path = _export(tmp_path)
    code = f"""
import signal, time
from clef_prof.analyze import export
export.READER = {reader!r}
cap = export.Export.open({str(path)!r})
def stop(*a):
    raise KeyboardInterrupt
signal.signal(signal.SIGALRM, stop)
signal.setitimer(signal.ITIMER_REAL, 0.5)
try:
    cap.read({INFINITE!r}, ["x"], {{"x": "str"}})
except KeyboardInterrupt:
    print("caller stopped")
s = cap.stream([export.Query(i, {INFINITE!r}, ["x"]) for i in range(3)], workers=2)
time.sleep(0.5)
s.close()
cap.close()
print("stream stopped")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stdout.splitlines() == ["caller stopped", "stream stopped"], p.stdout + p.stderr


@pytest.mark.native
def test_every_reader_gives_the_same_analysis(capture, monkeypatch):
    """The whole analysis of a real capture, its JSON, through each reader: the C reader against
    ADBC and sqlite3 (each reads every query: integer columns, text columns, rowid windows on
    reader threads and on the caller's)."""
    from clef_prof.analyze.result import analyze

    path = str(capture("gpu25-concurrent"))
    got = {}
    for name in ("native", "sqlite", "adbc"):
        monkeypatch.setattr(export_module, "READER", name)
        got[name] = analyze(path).result.to_json()
    assert got["native"] == got["sqlite"] == got["adbc"] and got["native"]["requests"] > 0
