"""When a Dask cluster pays: captures per second of `analyze_many` on local threads against a real
dask.distributed cluster of worker processes on this machine (scheduler and workers started here),
on the same captures, in one run. A remote cluster adds the network and the shared file system.

    python3 benchmarks/bench_dask.py [--copies 4] [--workers 2] [CAPTURE ...]   (default: traces/*.sqlite)
"""
from __future__ import annotations

import argparse
import glob
import os
import time

from distributed import Client, LocalCluster

from clef_prof.analyze.parallel import analyze_many


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--copies", type=int, default=4, help="each capture analysed this many times")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = (a.captures or sorted(glob.glob(os.path.join(root, "traces", "*.sqlite")))) * a.copies
    mb = sum(os.path.getsize(p) for p in paths) / 1e6
    analyze_many(paths[:1])                                        # warm imports and the page cache
    local = timed(lambda: analyze_many(paths))
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        addr = cl.scheduler_address
        with Client(addr) as c:
            c.wait_for_workers(a.workers)
        analyze_many(paths[:a.workers], dask=addr)                 # the workers import clef_prof once
        dask = timed(lambda: analyze_many(paths, dask=addr))
    print(f"{len(paths)} captures, {mb:.1f} MB, {os.cpu_count()} CPUs")
    print(f"local threads: {local:6.2f} s  {len(paths) / local:6.2f} captures/s")
    print(f"dask, {a.workers} workers: {dask:6.2f} s  {len(paths) / dask:6.2f} captures/s  "
          f"({local / dask:.2f}x local)")


if __name__ == "__main__":
    main()
