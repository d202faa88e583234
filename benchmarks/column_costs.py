#!/usr/bin/env python3
"""What each column analyze reads costs, table by table, on one export (issue 26).

    python benchmarks/column_costs.py EXPORT.sqlite [--repeat 5]

For each big table analyze streams (CUDA API calls of interest, kernels, memcpys), the CPU
time of its query as analyze sends it (ADBC into Arrow, read as NumPy), and of the same query
with each column left out in turn; beside it the floor of the same columns (SQLite decoding
them in C, summed, one thread). The difference is what that column costs. Thread CPU time,
best of --repeat rounds, the variants interleaved in each round (the host may be shared).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clef_prof.analyze.figures import cuda as cu  # noqa: E402
from clef_prof.analyze.read.export import AdbcConnection, Export, _to_numpy  # noqa: E402
from clef_prof.base.safeio import readonly_uri  # noqa: E402


def _split(select: str) -> list[str]:
    """A select list's expressions (commas inside parentheses kept)."""
    out, depth, cur = [], 0, ""
    for ch in select:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def queries(cap: Export) -> dict[str, tuple[list[str], str, str]]:
    """table -> (column expressions as analyze selects them, FROM ..., WHERE ...)."""
    _, wanted = cu.kind_lut(cap)
    out = {cu.RUNTIME: (['start', '"end"', "globalTid", "correlationId", "nameId"], cu.RUNTIME,
                        f"nameId IN ({','.join(map(str, wanted)) or 'NULL'})")}
    for table in (cu.KERNEL, cu.MEMCPY):
        if cap.has(table):
            _, _, sql, _ = cu._gpu_spec(cap, table, cu.GPU_TABLES[table], device=False)
            cols = _split(sql[len("SELECT "):sql.index(f" FROM {table}")])
            out[table] = (cols, table, "1")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    cap = Export.open(args.export)
    uri = readonly_uri(args.export)
    con, adbc = cap._conn, AdbcConnection(uri)

    def arrow(sql: str) -> None:
        t = adbc.arrow_table(sql)
        for i in range(t.num_columns):
            _to_numpy(t.column(i), None)

    def scan(sql: str) -> None:
        con.execute(sql).fetchall()

    runs = {}
    for table, (cols, frm, where) in queries(cap).items():
        variants = [("all", cols)] + [(f"without {c}", [x for x in cols if x != c]) for c in cols]
        for label, keep in variants:
            runs[(table, label, "adbc")] = (arrow, f"SELECT {', '.join(keep)} FROM {frm} WHERE {where}")
        runs[(table, "all", "floor")] = (scan, f"SELECT count(*), {', '.join(f'total({c})' for c in cols)} "
                                                f"FROM {frm} WHERE {where}")
    best = {k: float("inf") for k in runs}
    for _ in range(args.repeat):
        for k, (fn, sql) in runs.items():
            c0 = time.thread_time()
            fn(sql)
            best[k] = min(best[k], time.thread_time() - c0)
    print(f"{args.export}: thread CPU s, best of {args.repeat}; load {os.getloadavg()[0]:.1f}\n")
    print("| table | query | floor (C scan) s | ADBC s | column's cost s |")
    print("|---|---|---|---|---|")
    for table in queries(cap):
        full = best[(table, "all", "adbc")]
        print(f"| {table} | all | {best[(table, 'all', 'floor')]:.3f} | {full:.3f} | |")
        for (t, label, kind), v in best.items():
            if t == table and kind == "adbc" and label != "all":
                print(f"| | {label} | | {v:.3f} | {full - v:+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
