#!/usr/bin/env python3
"""Scale a real Nsight Systems SQLite export to a target size by tiling its event rows in time.

    python benchmarks/scale_export.py SRC.sqlite OUT.sqlite --size 1G
    python benchmarks/scale_export.py SRC.sqlite OUT.sqlite --tiles 3

Tile k (k = 1 .. K-1) is a copy of every event row of the source, shifted by k * span in
time and by k * (max + 1) in correlationId (and NVTX rangeId), appended to the same table,
so an export tiled K times holds exactly K times the source's events, in time order,
table by table (each table's pages stay contiguous, as in a real export). span is the
source's session length (ANALYSIS_DETAILS.duration), so the copies lie back to back and every
one inside the session, as the parts of one long capture do; the session grows to K * span:

- event tables are the tables with a `start` (or `timestamp`) column and no PRIMARY KEY
  (NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME / KERNEL / MEMCPY / MEMSET / SYNCHRONIZATION /
  GRAPH_TRACE, OSRT_API, PROFILER_OVERHEAD, ...); DIAGNOSTIC_EVENT is kept once;
- rows that set the session up are kept once, where they are: NVTX domain create/destroy
  (eventType 75/76) and any row with a negative timestamp (e.g. CUDA graph creation); one
  of them that ends at or after the session's end (a range open at the end) is stretched to
  the tiled session's end;
- rows the session's end cuts (a time at or after `duration`: a call in flight, a range still
  open when capture stopped) are in the last copy only, as only the end of a long capture
  cuts rows: the copies before hold every other row;
- StringIds, ThreadNames, PROCESSES, callchains, ENUM_*, META_DATA_*, TARGET_INFO_* and every
  other table are kept once (callchain ids stay valid: the copies reference the same chains);
- without ANALYSIS_DETAILS, span = the latest timestamp of any tiled row + 1 ns, and no row is
  taken for cut by the end.

The schema is left untouched (no index, no ANALYZE table), so the result stays valid input
for nsys's own tools (`nsys stats`). The work is K INSERT ... SELECT statements per table in
one connection with journal_mode=OFF and synchronous=OFF: about 1 GB per minute here.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import sys
import time

KEEP_ONCE_TABLES = {"DIAGNOSTIC_EVENT"}
NVTX_KEEP_ONCE_TYPES = (75, 76)          # domain create / destroy
TIME_COLUMNS = ("start", "end", "timestamp")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?B)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100M, 1G, 4G)")
    mult = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns(con: sqlite3.Connection, table: str) -> list[tuple[str, int]]:
    """(name, pk) of each column."""
    return [(r[1], r[5]) for r in con.execute(f"PRAGMA table_info({_q(table)})")]


def event_tables(con: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """(tiled, kept once) table names."""
    tiled, once = [], []
    rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                       "ORDER BY rowid").fetchall()
    for name, sql in rows:
        cols = _columns(con, name)
        names = {c for c, _ in cols}
        has_time = "start" in names or "timestamp" in names
        has_key = any(pk for _, pk in cols) or any(r[2] for r in con.execute(f"PRAGMA index_list({_q(name)})"))
        (tiled if has_time and not has_key and name not in KEEP_ONCE_TABLES else once).append(name)
    return tiled, once


def _once_condition(table: str, names: set[str]) -> str:
    """SQL that is true for the rows of `table` kept once (not tiled)."""
    conds = []
    tcol = "start" if "start" in names else "timestamp"
    conds.append(f"COALESCE({_q(tcol)}, 0) < 0")
    if table == "NVTX_EVENTS" and "eventType" in names:
        conds.append(f"eventType IN {NVTX_KEEP_ONCE_TYPES}")
    return " OR ".join(conds)


def source_size(con: sqlite3.Connection, tiled: list[str]) -> tuple[int, int]:
    """(bytes of the tiled tables, bytes of everything else), from dbstat when compiled in."""
    page = con.execute("PRAGMA page_size").fetchone()[0]
    total = page * con.execute("PRAGMA page_count").fetchone()[0]
    try:
        per = dict(con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    except sqlite3.Error:
        return total, 0
    t = sum(per.get(n, 0) for n in tiled)
    return t, total - t


def scale(src: str, out: str, tiles: int | None = None, size: int | None = None, quiet: bool = False) -> dict:
    """Write `out`: `src` with its event rows tiled `tiles` times (or enough to reach `size` bytes)."""
    t0 = time.perf_counter()
    if os.path.abspath(src) == os.path.abspath(out):
        raise SystemExit("scale_export: OUT must differ from SRC")
    tmp = out + ".part"
    for p in (tmp, tmp + "-journal"):
        if os.path.exists(p):
            os.remove(p)
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o644)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE", "temp_store=MEMORY",
                       "cache_size=-262144"):
            con.execute(f"PRAGMA {pragma}")
        tiled, once = event_tables(con)
        tiled_bytes, static_bytes = source_size(con, tiled)
        if tiles is None:
            if size is None:
                raise SystemExit("scale_export: give --tiles or --size")
            tiles = max(1, round((size - static_bytes) / max(tiled_bytes, 1)))

        # one shift for all tables: correlationIds join RUNTIME to the GPU tables
        corr_max, t_max, range_max = 0, 0, 0
        info = {}
        for t in tiled:
            names = {c for c, _ in _columns(con, t)}
            once_sql = _once_condition(t, names)
            max_rowid = con.execute(f"SELECT max(rowid) FROM {_q(t)}").fetchone()[0] or 0
            tcols = [c for c in TIME_COLUMNS if c in names]
            agg = ", ".join(f"max({_q(c)})" for c in tcols)
            vals = con.execute(f"SELECT {agg} FROM {_q(t)} WHERE NOT ({once_sql})").fetchone()
            t_max = max([t_max, *[v for v in vals if v is not None]])
            if "correlationId" in names:
                corr_max = max(corr_max, con.execute(f"SELECT COALESCE(max(correlationId), 0) FROM {_q(t)}").fetchone()[0])
            if t == "NVTX_EVENTS" and "rangeId" in names:
                range_max = con.execute("SELECT COALESCE(max(rangeId), 0) FROM NVTX_EVENTS").fetchone()[0]
            info[t] = (names, once_sql, max_rowid)

        duration = None
        if "ANALYSIS_DETAILS" in once:
            row = con.execute("SELECT max(duration) FROM ANALYSIS_DETAILS").fetchone()
            duration = int(row[0]) if row and row[0] is not None and row[0] > 0 else None
        span = duration or int(t_max) + 1
        corr_shift, range_shift = int(corr_max) + 1, int(range_max) + 1

        con.execute("BEGIN")
        for t in tiled:
            names, once_sql, max_rowid = info[t]
            cols = [c for c, _ in _columns(con, t)]
            col_list = ", ".join(_q(c) for c in cols)
            tcols = [c for c in TIME_COLUMNS if c in names]
            # cut by the session's end: in the last copy only
            edge_sql = " OR ".join(f"COALESCE({_q(c)}, 0) >= {duration}" for c in tcols) if duration else "0"
            for k in range(1, tiles):
                exprs = []
                for c in cols:
                    if c in TIME_COLUMNS:
                        exprs.append(f"{_q(c)} + {k * span}")
                    elif c == "correlationId":
                        exprs.append(f"{_q(c)} + {k * corr_shift}")
                    elif c == "rangeId" and t == "NVTX_EVENTS":
                        exprs.append(f"{_q(c)} + {k * range_shift}")
                    else:
                        exprs.append(_q(c))
                edge = "" if k == tiles - 1 else f" AND NOT ({edge_sql})"
                con.execute(f"INSERT INTO {_q(t)} ({col_list}) SELECT {', '.join(exprs)} FROM {_q(t)} "
                            f"WHERE rowid <= {max_rowid} AND NOT ({once_sql}){edge} ORDER BY rowid")
            if tiles > 1 and duration:
                con.execute(f"DELETE FROM {_q(t)} WHERE rowid <= {max_rowid} AND NOT ({once_sql}) AND ({edge_sql})")
                if "end" in names:          # open at the session's end from before it started
                    con.execute(f'UPDATE {_q(t)} SET "end" = "end" + {(tiles - 1) * span} '
                                f'WHERE rowid <= {max_rowid} AND ({once_sql}) AND "end" >= {duration}')
            if not quiet:
                print(f"  {t}: x{tiles}", file=sys.stderr)
        if duration is not None and tiles > 1:
            new = tiles * span
            cols = {c for c, _ in _columns(con, "ANALYSIS_DETAILS")}
            sets = ["duration = ?"] + (["stopTime = startTime + ?"] if {"stopTime", "startTime"} <= cols else [])
            con.execute(f"UPDATE ANALYSIS_DETAILS SET {', '.join(sets)}", (new,) * len(sets))
        con.execute("COMMIT")
    finally:
        con.close()
    os.replace(tmp, out)
    summary = {"source": src, "output": out, "tiles": tiles, "bytes": os.path.getsize(out), "span_ns": span,
               "corr_shift": corr_shift, "tiled_tables": tiled, "seconds": round(time.perf_counter() - t0, 2)}
    if not quiet:
        print(f"{out}: {summary['bytes'] / 2**20:.0f} MiB, {tiles} tiles of {span / 1e9:.3f} s, "
              f"{summary['seconds']} s", file=sys.stderr)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="an nsys SQLite export (e.g. gpu-q1c16-main.sqlite)")
    p.add_argument("out", help="the scaled export to write")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--tiles", type=int, help="number of copies of the event rows (1 = the source)")
    g.add_argument("--size", type=parse_size, help="target size, e.g. 100M, 1G, 4G")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.tiles is not None and args.tiles < 1:
        p.error("--tiles must be >= 1")
    summary = scale(args.src, args.out, tiles=args.tiles, size=args.size, quiet=args.quiet)
    print(json.dumps({k: v for k, v in summary.items() if k != "tiled_tables"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
