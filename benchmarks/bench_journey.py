#!/usr/bin/env python3
"""Time and peak memory of `analyze` with and without the request journeys, on a tiled capture.

    python benchmarks/bench_journey.py                       # tests/data/gpu25-journey x45: ~100k requests, 0.47 GB
    python benchmarks/bench_journey.py --size 1G             # tiled to 1 GiB: ~210k requests
    python benchmarks/bench_journey.py --tiles 5             # a smaller one
    python benchmarks/bench_journey.py --export BIG.sqlite   # an export made before

The source is the GPU recording in tests/data (2,225 request ranges, 149 batches, 24.8 MB),
tiled in time by benchmarks/scale_export.py. Each run is a fresh `python -c` process (best of
--repeat, wall time; peak RSS from getrusage): once as analyze runs, once with the journey step
replaced by one that returns nothing. Journeys are read with their own queries (request ranges,
enqueue marks, the batches' full rid lists) and joined with sorted searches: the issue's bound is
1.5x the time and memory of analyze without them.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import clef_prof.analyze.pipeline as res
if sys.argv[3] == "off":
    res._journeys = lambda cap, stages, table: (None, None)
t = time.perf_counter()
a = res.analyze(sys.argv[2])
wall = time.perf_counter() - t
j = a.result.journey
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "requests": None if j is None else j.request_ranges, "complete": None if j is None else j.complete}))
"""


def distinct_ids(src: str, export: str) -> int:
    """Give every tile its own request ids: the copies of `scale_export` repeat the source's ids, so
    a capture tiled K times has the distinct messages of one tile only, and work done once per
    distinct message (the ids' parse) would be K times too cheap. Each id in a request range, an
    enqueue mark or a batch's `rid=` list gets `t<k>`, k the tile it lies in (start // the source's
    span). Returns the rows changed."""
    import sqlite3

    con = sqlite3.connect(src)
    span = con.execute("SELECT max(duration) FROM ANALYSIS_DETAILS").fetchone()[0]
    con.close()
    con = sqlite3.connect(export)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    with con:
        k = f"'t' || (start / {int(span)})"
        n = con.execute(f"UPDATE NVTX_EVENTS SET text = text || {k} "
                        "WHERE text LIKE 'request rid=%' OR text LIKE 'enqueued rid=%'").rowcount
        n += con.execute(f"UPDATE NVTX_EVENTS SET text = replace(text, ',', {k} || ',') || {k} "
                         "WHERE text LIKE '% rid=%' AND text NOT LIKE 'request rid=%' "
                         "AND text NOT LIKE 'enqueued rid=%'").rowcount
    con.close()
    return n


def run(export: str, mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), export, mode], capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--tiles", type=int, default=45)
    size.add_argument("--size", help="tile to this size instead (scale_export.py --size: 1G, 500M)")
    ap.add_argument("--export", help="an export to use instead of tiling tests/data/gpu25-journey")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--same-ids", action="store_true",
                    help="keep the source's request ids in every tile (by default each tile gets its own: distinct_ids)")
    a = ap.parse_args()
    tmp = None
    export = a.export
    if export is None:
        tmp = tempfile.mkdtemp(prefix="bench-journey-")
        src = os.path.join(tmp, "src.sqlite")
        with lzma.open(ROOT / "tests" / "data" / "gpu25-journey.sqlite.xz") as f, open(src, "wb") as g:
            shutil.copyfileobj(f, g)
        export = os.path.join(tmp, "tiled.sqlite")
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale_export.py"), src, export,
                        *(["--size", a.size] if a.size else ["--tiles", str(a.tiles)])], check=True, capture_output=True)
        if not a.same_ids:
            print(f"distinct ids per tile: {distinct_ids(src, export):,} messages changed")
        os.unlink(src)
    try:
        print(f"export: {export} ({os.path.getsize(export) / 1e9:.2f} GB)")
        out = {}
        for mode in ("off", "on"):
            best = min((run(export, mode) for _ in range(a.repeat)), key=lambda r: r["wall_s"])
            out[mode] = best
            print(f"  journeys {mode:3s}: {best['wall_s']:7.2f} s wall, peak RSS {best['rss_mb']:8.1f} MB"
                  + (f", {best['requests']:,} request ranges ({best['complete']:,} complete)" if best["requests"] else ""))
        print(f"  ratio: time {out['on']['wall_s'] / out['off']['wall_s']:.2f}x, "
              f"memory {out['on']['rss_mb'] / out['off']['rss_mb']:.2f}x (bound: 1.5x each)")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
