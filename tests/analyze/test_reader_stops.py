"""The C reader against the others on a whole analysis, its own refusals (one read-only
statement; SQLite's messages as one line), and a read that never ends (a hostile export can make
a table a view that never ends) stopped by Ctrl-C on the caller's thread and by closing the
stream on reader threads."""
from __future__ import annotations

import signal
import sqlite3
import threading
import time

import pytest

from clef_prof.analyze.read import export as export_module
from clef_prof.analyze.read.export import Export
from clef_prof.base.errors import CaptureError

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


class Watchdog:
    """After `after` seconds, calls `stop` every 0.1 s until cancelled: what would otherwise hang
    the suite is stopped, and `fired` makes the test fail."""

    def __init__(self, stop, after: float = 30):
        self.fired = False
        self._done = threading.Event()
        self._stop, self._after = stop, after
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        if self._done.wait(self._after):
            return
        self.fired = True
        while not self._done.wait(0.1):
            self._stop()

    def cancel(self):
        self._done.set()
        self._thread.join()


@pytest.mark.native
def test_ctrl_c_stops_the_callers_read(tmp_path, monkeypatch):
    """Ctrl-C (here SIGALRM raising KeyboardInterrupt) stops a read on the caller's thread: the C
    reader lets signal handlers run while it reads. In this process, so that a mutation pass
    traces it. (sqlite3 and ADBC run a query to its end before a signal handler runs.)"""
    monkeypatch.setattr(export_module, "READER", "native")
    cap = Export.open(str(_export(tmp_path)))

    def raise_interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, raise_interrupt)
    dog = Watchdog(lambda: cap._main_conn.interrupt())
    try:
        with pytest.raises(KeyboardInterrupt):
            signal.setitimer(signal.ITIMER_REAL, 0.3)      # set in here: it cannot land outside
            cap.read(INFINITE, ["x"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        dog.cancel()
        cap.close()
    assert not dog.fired


@pytest.mark.parametrize("reader", [pytest.param("native", marks=pytest.mark.native), "sqlite"])
@pytest.mark.parametrize("wait", [0, 0.3], ids=["at once", "reading"])
def test_closing_a_stream_stops_its_reads(tmp_path, monkeypatch, reader, wait):
    """Closing a stream stops the reads on its reader threads, also one that starts just as it
    closes (an interrupt SQLite forgets when no statement runs). (An ADBC read cannot be
    stopped: it finishes its window.)"""
    monkeypatch.setattr(export_module, "READER", reader)
    cap = Export.open(str(_export(tmp_path)))
    for _ in range(5 if wait == 0 else 1):
        stream = cap.stream([export_module.Query(i, INFINITE, ["x"]) for i in range(3)], workers=2)
        time.sleep(wait)
        dog = Watchdog(cap.interrupt)
        stream.close()
        dog.cancel()
        assert not dog.fired
    cap.close()


@pytest.mark.native
def test_every_reader_gives_the_same_analysis(capture, monkeypatch):
    """The whole analysis of a real capture, its JSON, through each reader: the C reader against
    ADBC and sqlite3 (each reads every query: integer columns, text columns, rowid windows on
    reader threads and on the caller's)."""
    from clef_prof.analyze.pipeline import analyze

    path = str(capture("gpu25-concurrent"))
    got = {}
    for name in ("native", "sqlite", "adbc"):
        monkeypatch.setattr(export_module, "READER", name)
        got[name] = analyze(path).result.to_json()
    assert got["native"] == got["sqlite"] == got["adbc"] and got["native"]["requests"] > 0
