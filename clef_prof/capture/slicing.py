"""`clef-prof slice`: cut a time window out of an export into a new, smaller, consistent one.

Rows are kept when they lie wholly inside the window (NVTX ranges nested in a range cut by
the window go with it); GPU rows are kept exactly when their
launching API call is kept, so every join still holds. Metadata, strings and enum tables are
copied whole; times are shifted so that the window is the slice's session (0 to its length).
The result is scrubbed (clef_prof.capture.scrub) and written through a temporary file, renamed only on
success. The input is only read.
"""
from __future__ import annotations

import os
import sqlite3

from ..base.errors import CaptureError

API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME",)
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
              "CUPTI_ACTIVITY_KIND_CUDA_EVENT")


def slice_capture(src: str, dst: str, t0_ns: int, t1_ns: int) -> dict:
    """Write the window [t0, t1] (ns from session start) of `src` to the new file `dst`, times
    shifted so that the slice's session is the window; nothing appears at `dst` on failure."""
    from ..analyze.read.export import Export, check_file
    from ..base.safeio import check_output
    from .scrub import require_export, rewrite, scrub

    check_file(src)
    check_output(dst, [src])
    if t1_ns <= t0_ns:
        raise CaptureError("slice: --to must be after --from")
    with Export.open(src) as cap:
        tables = set(cap.tables)
        require_export(src, tables)
        session = cap.duration_ns
    if session is not None:
        if t0_ns >= session or t1_ns <= 0:
            raise CaptureError(f"slice: the window {t0_ns / 1e9:g}..{t1_ns / 1e9:g} s lies outside the session, "
                               f"which is {session / 1e9:.6g} s long")
        t1_ns = min(t1_ns, session)
    t0_ns = max(t0_ns, 0)
    removed: dict = {}
    kept: dict = {}

    def edit(d):
        _cut(d, tables, t0_ns, t1_ns)
        removed.update(scrub(d))
        kept.update({t: d.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                     for t in sorted(tables) if not t.startswith("sqlite_")})

    rewrite(src, dst, edit, "slice")
    return {"rows": kept, "scrubbed": removed, "bytes": os.path.getsize(dst), "window_ns": (t0_ns, t1_ns)}


def _cut(d: sqlite3.Connection, tables: set[str], t0_ns: int, t1_ns: int) -> None:
    """Keep the rows inside the window, then make the window the session: times shifted by -t0,
    ANALYSIS_DETAILS and the wall-clock start of time 0 set to the window."""
    w = (t0_ns, t1_ns)
    for t in API_TABLES:
        if t in tables:
            d.execute(f'DELETE FROM {t} WHERE NOT (start >= ? AND "end" <= ?)', w)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        d.execute("CREATE INDEX clef_slice_corr ON CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)")
    for t in GPU_TABLES:
        if t in tables and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            d.execute(f"DELETE FROM {t} WHERE NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                      f"WHERE r.correlationId = {t}.correlationId "
                      f"AND (r.globalTid >> 24) = ({t}.globalPid >> 24))")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        d.execute("DROP INDEX clef_slice_corr")
    if "NVTX_EVENTS" in tables:
        # a range cut by one edge of the window takes the ranges nested in it on its thread with it,
        # as nsys does with a batch still open at the capture end; one that spans the whole window
        # (a session-long range, such as a server's profiling-window mark) takes nothing
        d.execute('CREATE TEMP TABLE clef_cut AS SELECT globalTid, start, "end" FROM NVTX_EVENTS WHERE '
                  'eventType IN (59, 60, 70, 71) AND start < ? AND "end" > ? AND NOT (start >= ? AND "end" <= ?) '
                  'AND NOT (start < ? AND "end" > ?)', (t1_ns, t0_ns, *w, *w))
        d.execute('DELETE FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) AND EXISTS (SELECT 1 FROM clef_cut c '
                  'WHERE c.globalTid = NVTX_EVENTS.globalTid AND c.start <= NVTX_EVENTS.start '
                  'AND NVTX_EVENTS."end" <= c."end")')
        d.execute("DROP TABLE clef_cut")
        # ranges wholly inside; marks inside; domain, category and thread-name rows always
        d.execute('DELETE FROM NVTX_EVENTS WHERE eventType NOT IN (33, 39, 75, 76) AND NOT '
                  '(start >= ? AND COALESCE("end", start) <= ?)', w)
    for t in ("OSRT_API", "PROFILER_OVERHEAD", "CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS",
              "CUPTI_ACTIVITY_KIND_OVERHEAD", "SYSCALL"):
        if t in tables:
            d.execute(f'DELETE FROM {t} WHERE NOT (start >= ? AND COALESCE("end", start) <= ?)', w)
    for t in ("SCHED_EVENTS", "COMPOSITE_EVENTS"):
        if t in tables:
            d.execute(f"DELETE FROM {t} WHERE NOT (start >= ? AND start <= ?)", w)
    if "DIAGNOSTIC_EVENT" in tables:
        d.execute("DELETE FROM DIAGNOSTIC_EVENT WHERE timestamp > 0 AND NOT (timestamp >= ? AND timestamp <= ?)", w)
    if "OSRT_CALLCHAINS" in tables and "OSRT_API" in tables:
        d.execute("DELETE FROM OSRT_CALLCHAINS WHERE id NOT IN (SELECT callchainId FROM OSRT_API "
                  "WHERE callchainId IS NOT NULL)")
    if "SAMPLING_CALLCHAINS" in tables and "COMPOSITE_EVENTS" in tables:
        d.execute("DELETE FROM SAMPLING_CALLCHAINS WHERE id NOT IN (SELECT id FROM COMPOSITE_EVENTS)")
    t0 = t0_ns
    for t in sorted(tables):
        cols = {r[1] for r in d.execute(f'PRAGMA table_info("{t}")')}
        for c in ("start", "end", "timestamp"):
            if c in cols and (t, c) != ("DIAGNOSTIC_EVENT", "timestamp"):
                d.execute(f'UPDATE "{t}" SET "{c}" = "{c}" - ? WHERE "{c}" IS NOT NULL', (t0,))
    if "DIAGNOSTIC_EVENT" in tables:
        d.execute("UPDATE DIAGNOSTIC_EVENT SET timestamp = timestamp - ? WHERE timestamp > 0", (t0,))
    if "ANALYSIS_DETAILS" in tables:
        d.execute("UPDATE ANALYSIS_DETAILS SET duration = ?", (t1_ns - t0_ns,))
        cols = {r[1] for r in d.execute("PRAGMA table_info(ANALYSIS_DETAILS)")}
        if {"startTime", "stopTime"} <= cols:
            d.execute("UPDATE ANALYSIS_DETAILS SET startTime = startTime + ?, stopTime = startTime + ?",
                      (t0_ns, t1_ns))
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        d.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (t0_ns,))
