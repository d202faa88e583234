#!/usr/bin/env python3
"""What each reader costs on the queries analyze streams, beside SQLite's own scan of them.

The queries are the ones `analyze` sends to its reader threads on FILE (caught by running one
analysis with `Export.read` wrapped): the CUDA API calls of interest, the kernels and the
memcpys, in rowid windows. Each round reads them all once through each reader, one thread, and
takes that thread's CPU time, so that a load change meets every reader alike:

- floor: `WITH q AS (query) SELECT count(*), total(c1), ...` on Python's sqlite3: SQLite
  decodes every value the query yields and nothing leaves C;
- native: the C reader (clef_prof.analyze.read._scan), columns into NumPy;
- adbc: ADBC into Arrow, columns into NumPy (the reader without the C one, from 256 MB);
- sqlite: the group_concat reader (the one without the C reader, below 256 MB).

    python benchmarks/bench_readers.py /tmp/main-1g.sqlite --repeat 5 [--only floor,native,adbc]
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clef_prof.analyze.read import export  # noqa: E402
from clef_prof.base.safeio import readonly_uri  # noqa: E402


def stream_queries(path: str) -> list[tuple[str, list[str]]]:
    """(sql, column names) of every query one analysis of `path` reads on its reader threads."""
    from clef_prof.analyze.pipeline import analyze

    seen: list[tuple[str, list[str]]] = []
    orig = export.Export.read

    def read(self, sql, names, dtypes=None, threaded=False):
        if threaded:
            seen.append((sql, list(names)))
        return orig(self, sql, names, dtypes, threaded)

    export.Export.read = read
    try:
        analyze(path)
    finally:
        export.Export.read = orig
    return seen


def floor(path: str, queries) -> int:
    con = sqlite3.connect(readonly_uri(path), uri=True)
    rows = 0
    for sql, names in queries:
        cols = ", ".join(f"c{i}" for i in range(len(names)))
        aggs = ", ".join(f"total(c{i})" for i in range(len(names)))
        rows += con.execute(f"WITH q({cols}) AS ({sql}) SELECT count(*), {aggs} FROM q").fetchone()[0]
    con.close()
    return rows


def through(reader: str):
    def run(path: str, queries) -> int:
        export.READER = reader
        cap = export.Export.open(path)
        try:
            return sum(len(next(iter(cap.read(sql, names).values()))) for sql, names in queries)
        finally:
            cap.close()
    run.__name__ = reader
    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="floor,native,adbc,sqlite", help="readers, comma-separated")
    p.add_argument("--json", help="write every round here")
    args = p.parse_args(argv)
    path = os.path.abspath(args.file)
    queries = stream_queries(path)
    runs = {"floor": floor, "native": through("native"), "adbc": through("adbc"), "sqlite": through("sqlite")}
    chosen = [r for r in args.only.split(",") if r]
    for name, missing in (("native", export._native_module() is None), ("adbc", export._adbc_module() is None)):
        if name in chosen and missing:
            chosen.remove(name)
            print(f"bench_readers: {name} is not installed here; left out", file=sys.stderr)
    times: dict[str, list[float]] = {r: [] for r in chosen}
    rows = {}
    for k in range(args.repeat):
        for r in chosen:
            t = time.thread_time()
            rows[r] = runs[r](path, queries)
            times[r].append(time.thread_time() - t)
        print(f"bench_readers: round {k + 1}/{args.repeat}", file=sys.stderr)
    print(f"{len(queries)} queries, {rows[chosen[0]]:,} rows, {os.path.getsize(path) / 1e6:,.0f} MB; thread CPU s, "
          f"{args.repeat} rounds, load {os.getloadavg()[0]:.1f}\n")
    print("| reader | best s | median s | ÷ floor (best) | rounds |\n|---|---|---|---|---|")
    base = min(times["floor"]) if "floor" in times else None
    for r, v in times.items():
        ratio = f"{min(v) / base:.2f}" if base else "—"
        print(f"| {r} | {min(v):.3f} | {sorted(v)[len(v) // 2]:.3f} | {ratio} | {' '.join(f'{x:.2f}' for x in v)} |")
    if len(set(rows.values())) != 1:
        print(f"bench_readers: the readers read different row counts: {rows}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"file": path, "queries": len(queries), "rows": rows, "thread_cpu_s": times}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
