"""`clef-prof slice`: cut a time window out of an export into a new, smaller, consistent one.

Rows are kept when they lie wholly inside the window; GPU rows are kept exactly when their
launching API call is kept, so every join still holds. Metadata, strings and enum tables are
copied whole. The result is scrubbed of environment and streams. The input is only read.
"""
from __future__ import annotations

import os
import sqlite3

from .errors import CaptureError

API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME",)
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
              "CUPTI_ACTIVITY_KIND_CUDA_EVENT")


def slice_capture(src: str, dst: str, t0_ns: int, t1_ns: int) -> dict:
    from .capture import Export, _uri, check_file
    from .scrub import scrub

    check_file(src)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise CaptureError("slice: the output must be a new file, not the input")
    if t1_ns <= t0_ns:
        raise CaptureError("slice: --to must be after --from")
    with Export.open(src) as cap:
        tables = set(cap.tables)
    if os.path.exists(dst):
        os.remove(dst)
    s = sqlite3.connect(_uri(src), uri=True)
    d = sqlite3.connect(dst)
    try:
        s.backup(d)
    except sqlite3.DatabaseError as exc:
        d.close()
        os.remove(dst)
        raise CaptureError(f"{src}: cannot read ({exc})") from None
    finally:
        s.close()
    kept = {}
    with d:
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
        removed = scrub(d)
        for t in sorted(tables):
            if not t.startswith("sqlite_"):
                kept[t] = d.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
    d.execute("VACUUM")
    d.close()
    return {"rows": kept, "scrubbed": removed, "bytes": os.path.getsize(dst)}


def add_parser(sub) -> None:
    p = sub.add_parser("slice", help="cut a time window of an export into a new, smaller, consistent export")
    p.add_argument("capture", help="input nsys SQLite export (read only)")
    p.add_argument("output", help="new SQLite file")
    p.add_argument("--from", dest="t0", type=float, required=True, help="window start, s from session start")
    p.add_argument("--to", dest="t1", type=float, required=True, help="window end, s from session start")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import math

    from .errors import ClefError
    if not all(math.isfinite(t) and abs(t) < 9e9 for t in (args.t0, args.t1)) or args.t0 >= args.t1:
        raise ClefError(f"--from {args.t0:g} --to {args.t1:g}: the window must be finite seconds (under 9e9), "
                        "with --from before --to")
    info = slice_capture(args.capture, args.output, int(args.t0 * 1e9), int(args.t1 * 1e9))
    print(f"wrote {args.output}: {info['bytes'] / 1e6:.2f} MB, window {args.t0:g}..{args.t1:g} s")
    return 0
