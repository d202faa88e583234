"""`clef-prof slice` on a real H200 capture (nsys 2025.3) against a reading of the source by hand:
which rows of each table a window keeps, the times shifted to the window, the session's length and
wall-clock start moved to it, and the window's edges (clamped to the session, refused outside it)."""
from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from clef_prof.capture.scrub import scrub_file
from clef_prof.capture.slicing import slice_capture
from clef_prof.base.errors import CaptureError

CAPTURE = "gpu25-q1c16-pr"          # RUNTIME, KERNEL, MEMCPY, SYNCHRONIZATION, GRAPH_TRACE, OSRT with call chains,
GPU = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
       "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
T0, T1 = 10_000_000, 600_000_000


def _rows(con, table, cols="*"):
    try:
        return con.execute(f'SELECT {cols} FROM "{table}"').fetchall()
    except sqlite3.OperationalError:        # a table this capture lacks
        return []


def _tables(con):
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _inside(start, end, t0, t1):
    return start >= t0 and (start if end is None else end) <= t1


def expected_rows(src: sqlite3.Connection, t0: int, t1: int) -> dict[str, int]:
    """Each table's rows the window keeps, by plain loops over the source."""
    want = {t: len(_rows(src, t)) for t in _tables(src) if not t.startswith("sqlite_")}
    runtime = [r for r in _rows(src, "CUPTI_ACTIVITY_KIND_RUNTIME", 'start, "end", correlationId, globalTid')
               if r[0] >= t0 and r[1] <= t1]
    want["CUPTI_ACTIVITY_KIND_RUNTIME"] = len(runtime)
    launched = {(corr, tid >> 24) for _, _, corr, tid in runtime}
    for t in GPU:
        if t in want:
            want[t] = sum((corr, pid >> 24) in launched for corr, pid in _rows(src, t, "correlationId, globalPid"))
    for t in ("OSRT_API", "PROFILER_OVERHEAD", "CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS",
              "CUPTI_ACTIVITY_KIND_OVERHEAD", "SYSCALL"):
        if t in want:
            want[t] = sum(_inside(s, e, t0, t1) for s, e in _rows(src, t, 'start, "end"'))
    if "OSRT_CALLCHAINS" in want:
        used = {c for s, e, c in _rows(src, "OSRT_API", 'start, "end", callchainId') if _inside(s, e, t0, t1)}
        want["OSRT_CALLCHAINS"] = sum(i in used for (i,) in _rows(src, "OSRT_CALLCHAINS", "id"))
    for t in ("SCHED_EVENTS", "COMPOSITE_EVENTS"):       # instants: kept by their start
        if t in want:
            want[t] = sum(t0 <= st <= t1 for (st,) in _rows(src, t, "start"))
    if "SAMPLING_CALLCHAINS" in want and "COMPOSITE_EVENTS" in want:
        kept = {i for i, st in _rows(src, "COMPOSITE_EVENTS", "id, start") if t0 <= st <= t1}
        want["SAMPLING_CALLCHAINS"] = sum(i in kept for (i,) in _rows(src, "SAMPLING_CALLCHAINS", "id"))
    if "DIAGNOSTIC_EVENT" in want:
        want["DIAGNOSTIC_EVENT"] = sum(ts <= 0 or t0 <= ts <= t1 for (ts,) in _rows(src, "DIAGNOSTIC_EVENT", "timestamp"))
    nvtx = _rows(src, "NVTX_EVENTS", 'eventType, start, "end", globalTid')
    ranges = [r for r in nvtx if r[0] in (59, 60, 70, 71)]
    # a range cut by one edge (not one spanning the whole window) takes the ranges nested in it
    cut = [r for r in ranges if r[1] < t1 and r[2] > t0 and not _inside(r[1], r[2], t0, t1)
           and not (r[1] < t0 and r[2] > t1)]
    gone = {id(r) for r in ranges for c in cut if c[3] == r[3] and c[1] <= r[1] and r[2] <= c[2]}
    want["NVTX_EVENTS"] = sum(id(r) not in gone and (r[0] in (33, 39, 75, 76) or _inside(r[1], r[2], t0, t1))
                              for r in nvtx)
    return want


@pytest.fixture(scope="module")
def sliced(capture, tmp_path_factory):
    src = str(capture(CAPTURE))
    out = tmp_path_factory.mktemp("slice") / "window.sqlite"
    info = slice_capture(src, str(out), T0, T1)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as s, sqlite3.connect(f"file:{out}?mode=ro", uri=True) as d:
        yield src, str(out), info, s, d


def test_every_table_keeps_the_rows_the_window_holds(sliced):
    src, out, info, s, d = sliced
    want = expected_rows(s, T0, T1)
    # the slice is scrubbed too: its system facts are those a scrub of the whole capture keeps (which
    # ones, tests/analyze/test_scrub.py says), whatever the window
    whole = Path(out).with_name("whole-scrubbed.sqlite")
    if not whole.exists():
        scrub_file(src, str(whole))
    with sqlite3.connect(whole) as w:
        facts = sorted(w.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV").fetchall())
    assert sorted(_rows(d, "TARGET_INFO_SYSTEM_ENV", "name, value")) == facts
    want["TARGET_INFO_SYSTEM_ENV"] = len(facts)
    got = {t: len(_rows(d, t)) for t in _tables(d) if not t.startswith("sqlite_")}
    assert got == want
    assert info["rows"] == want
    # the window is a real cut of every kind of row it has to handle
    for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "OSRT_API",
              "OSRT_CALLCHAINS", "NVTX_EVENTS", "DIAGNOSTIC_EVENT"):
        assert 0 < want[t] < len(_rows(s, t)), t
    assert info["bytes"] == os.path.getsize(out) < os.path.getsize(src)
    assert info["window_ns"] == (T0, T1)


def test_times_are_shifted_to_the_window(sliced):
    src, out, info, s, d = sliced
    for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API"):
        want = sorted((a - T0, b - T0) for a, b in _rows(s, t, 'start, "end"') if _inside(a, b, T0, T1))
        assert sorted(_rows(d, t, 'start, "end"')) == want
    # a GPU row keeps its own time, shifted, whatever the window: it goes with its launch
    launched = {(c, g >> 24) for a, b, c, g in _rows(s, "CUPTI_ACTIVITY_KIND_RUNTIME", 'start, "end", correlationId, globalTid')
                if _inside(a, b, T0, T1)}
    want = sorted((a - T0, b - T0) for a, b, c, p in _rows(s, "CUPTI_ACTIVITY_KIND_KERNEL", 'start, "end", correlationId, globalPid')
                  if (c, p >> 24) in launched)
    assert sorted(_rows(d, "CUPTI_ACTIVITY_KIND_KERNEL", 'start, "end"')) == want
    # diagnostics before time 0 stay where they were; the others move with the window
    before = [ts for (ts,) in _rows(s, "DIAGNOSTIC_EVENT", "timestamp") if ts <= 0]
    moved = [ts - T0 for (ts,) in _rows(s, "DIAGNOSTIC_EVENT", "timestamp") if T0 <= ts <= T1]
    assert sorted(ts for (ts,) in _rows(d, "DIAGNOSTIC_EVENT", "timestamp")) == sorted(before + moved)
    assert moved and before


def test_the_window_becomes_the_session(sliced):
    src, out, info, s, d = sliced
    (vid, _, start, _), = _rows(s, "ANALYSIS_DETAILS")
    assert _rows(d, "ANALYSIS_DETAILS") == [(vid, T1 - T0, start + T0, start + T1)]
    (utc, *rest), = _rows(s, "TARGET_INFO_SESSION_START_TIME")
    assert _rows(d, "TARGET_INFO_SESSION_START_TIME") == [(utc + T0, *rest)]


def test_window_edges(capture, tmp_path):
    src = str(capture(CAPTURE))
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as s:
        session = s.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0]
    # clamped to the session at both ends
    info = slice_capture(src, str(tmp_path / "end.sqlite"), session - 100_000_000, session + 5_000_000_000)
    assert info["window_ns"] == (session - 100_000_000, session)
    with sqlite3.connect(tmp_path / "end.sqlite") as d:
        assert d.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0] == 100_000_000
    info = slice_capture(src, str(tmp_path / "start.sqlite"), -5_000_000_000, 1)
    assert info["window_ns"] == (0, 1)
    for t0, t1 in ((T0, T0), (T1, T0), (session, session + 1), (session + 1, session + 2), (-10, 0), (-10, -5)):
        dst = tmp_path / f"bad-{t0}-{t1}.sqlite"
        with pytest.raises(CaptureError, match="slice: "):
            slice_capture(src, str(dst), t0, t1)
        assert not dst.exists()


@pytest.fixture(scope="module")
def more_tables(capture, tmp_path_factory):
    """gpu25-bertsrv (memsets) with the tables its recording did not hold added by SQL, as other
    nsys settings write them: CUDA events, CPU samples and their call chains, scheduling events,
    and SQLite's own statistics table."""
    from conftest import edited_copy
    out = tmp_path_factory.mktemp("more") / "more.sqlite"
    return edited_copy(
        capture("gpu25-bertsrv"), out,
        'CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT AS SELECT start, "end", correlationId, globalPid, deviceId, '
        "streamId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 5 = 0",
        "CREATE TABLE COMPOSITE_EVENTS (id INTEGER PRIMARY KEY, start INTEGER, globalTid INTEGER)",
        "INSERT INTO COMPOSITE_EVENTS (start, globalTid) SELECT start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "WHERE rowid % 7 = 0",
        "CREATE TABLE SAMPLING_CALLCHAINS (id INTEGER, symbol INTEGER, stackDepth INTEGER)",
        "INSERT INTO SAMPLING_CALLCHAINS SELECT id, 1, d.n FROM COMPOSITE_EVENTS, (SELECT 0 AS n UNION SELECT 1) d",
        "CREATE TABLE SCHED_EVENTS (start INTEGER, cpu INTEGER, isSchedIn INTEGER, globalTid INTEGER)",
        "INSERT INTO SCHED_EVENTS SELECT start, 0, 1, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid % 11 = 0",
        "ANALYZE")


def test_other_tables_nsys_writes_keep_the_rows_the_window_holds(more_tables, tmp_path):
    with sqlite3.connect(f"file:{more_tables}?mode=ro", uri=True) as s:
        session = s.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0]
        t0, t1 = session // 3, 2 * session // 3
        out = tmp_path / "window.sqlite"
        info = slice_capture(str(more_tables), str(out), t0, t1)
        want = expected_rows(s, t0, t1)
    with sqlite3.connect(out) as d:
        want["TARGET_INFO_SYSTEM_ENV"] = len(_rows(d, "TARGET_INFO_SYSTEM_ENV"))    # the scrub's, checked above
        got = {t: len(_rows(d, t)) for t in _tables(d) if not t.startswith("sqlite_")}
    assert got == want and info["rows"] == want          # SQLite's own tables are not the capture's rows
    with sqlite3.connect(f"file:{more_tables}?mode=ro", uri=True) as s:
        for t in ("CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "COMPOSITE_EVENTS",
                  "SAMPLING_CALLCHAINS", "SCHED_EVENTS"):
            assert 0 < want[t] < len(_rows(s, t)), t


def test_a_file_that_is_no_export_is_named_as_the_source(tmp_path):
    src = tmp_path / "plain.sqlite"
    with sqlite3.connect(src) as c:
        c.execute("CREATE TABLE t (x)")
    with pytest.raises(CaptureError, match=f"^{re.escape(str(src))}: not an Nsight Systems export"):
        slice_capture(str(src), str(tmp_path / "out.sqlite"), 0, 10)
    assert not (tmp_path / "out.sqlite").exists()


def test_rows_without_the_table_that_places_them_are_kept_whole(capture, tmp_path):
    """Without the runtime table nothing pairs a GPU row with a launch, and without OSRT_API nothing
    names a call chain: those rows are all kept (times shifted), not cut by a table that is not there."""
    from conftest import edited_copy
    src = edited_copy(capture(CAPTURE), tmp_path / "partial.sqlite",
                      "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME", "DROP TABLE OSRT_API")
    info = slice_capture(str(src), str(tmp_path / "out.sqlite"), T0, T1)
    with sqlite3.connect(src) as s:
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "OSRT_CALLCHAINS"):
            assert info["rows"][t] == len(_rows(s, t)) > 0, t
