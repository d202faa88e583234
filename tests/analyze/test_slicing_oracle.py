"""`clef-prof slice` on a real H200 capture (nsys 2025.3) against a reading of the source by hand:
which rows of each table a window keeps, the times shifted to the window, the session's length and
wall-clock start moved to it, and the window's edges (clamped to the session, refused outside it)."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from clef_prof.analyze.scrub import scrub_file
from clef_prof.analyze.slicing import slice_capture
from clef_prof.errors import CaptureError

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
    want = {t: len(_rows(src, t)) for t in _tables(src)}
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
    got = {t: len(_rows(d, t)) for t in _tables(d)}
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
