#!/usr/bin/env python3
"""How much memory does `clef-prof compare` of two captures take, against `analyze` of one?

    python benchmarks/bench_compare_mem.py A.sqlite B.sqlite                 # e.g. two 1 GB exports
    python benchmarks/bench_compare_mem.py A.sqlite B.sqlite --jobs 1,2,auto --repeat 3 --json out.json
    python benchmarks/bench_compare_mem.py A.sqlite B.sqlite --tree ../main     # another checkout's code
    taskset -c 0-3 python benchmarks/bench_compare_mem.py A.sqlite B.sqlite --jobs 1,auto --pools threads,processes

Each command runs in a fresh process, in a rotating order, every file in the page cache:
`clef-prof analyze A -f json`, `clef-prof analyze B -f json`, and `clef-prof compare --arm
main=A --arm pr=B -f json --jobs J` for each J (auto: compare's default, as analyze's), with
more than one capture at a time on each of --pools (`CLEF_PROF_POOL`: threads of one process, or
worker processes). For each run it reports the wall time and three peaks:

  largest   the peak RSS of the largest single process: the larger of os.wait4's ru_maxrss
            (the command and the children it reaped) and the sampled peak of any one process
            (worker processes started from a forkserver are not reaped by the command)
  tree      the peak of the RSS summed over the command and all its descendants (psutil,
            sampled every --interval s); an upper bound, since pages shared between processes
            (the forkserver's and its workers' libraries) count once per process
  cpu_s     (JSON only) user + system CPU of the command and the children it reaped, which
            leaves out workers started from a forkserver

It prints a Markdown table of medians (peaks: the largest of the runs) with each command's median
wall time over analyze A's and its peak over the larger analyze peak, and writes every run as JSON (--json). This process imports only
the standard library and psutil, so that the RSS high-water mark a child inherits before it
execs (Linux carries it into ru_maxrss) stays far below the figures measured.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20


def warm(path: str) -> None:
    """Read the file once so that every run finds it in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def run(cmd: list[str], env: dict, interval: float, cwd: str) -> dict:
    """Run `cmd` in `cwd` (stdout discarded) and sample its process tree until it exits."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    root = psutil.Process(p.pid)
    tree_peak = proc_peak = 0
    procs = 1
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        try:
            members = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            members = []
        procs = max(procs, len(members))
        total = 0
        for m in members:
            try:
                rss = m.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            total += rss
            proc_peak = max(proc_peak, rss)
        tree_peak = max(tree_peak, total)
        time.sleep(interval)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {p.returncode}: {err[-2000:]}")
    largest = max(ru.ru_maxrss * 1024, proc_peak)
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "largest_mb": largest / MB,
            "tree_mb": max(tree_peak, largest) / MB, "processes": procs, "load": load}


def summary(runs: list[dict]) -> dict:
    """Medians of the times, the largest of the peaks."""
    return {"runs": len(runs), "wall_s": statistics.median(r["wall_s"] for r in runs),
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "largest_mb": max(r["largest_mb"] for r in runs), "tree_mb": max(r["tree_mb"] for r in runs),
            "processes": max(r["processes"] for r in runs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the baseline export (arm main)")
    ap.add_argument("b", help="the other export (arm pr)")
    ap.add_argument("--jobs", default="1,2,auto", help="compare --jobs settings, comma-separated (default 1,2,auto)")
    ap.add_argument("--pools", default="threads",
                    help="for --jobs other than 1: threads, processes or both, comma-separated (default threads)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (default 3)")
    ap.add_argument("--interval", type=float, default=0.01, help="RSS sampling interval in s (default 0.01)")
    ap.add_argument("--tree", default=str(ROOT), help="the clef-prof source tree to run (default: this checkout; "
                                                       "another for a before/after comparison)")
    ap.add_argument("--json", help="write every run here")
    args = ap.parse_args(argv)
    args.a, args.b, tree = os.path.abspath(args.a), os.path.abspath(args.b), os.path.abspath(args.tree)
    for f in (args.a, args.b):
        if not os.path.isfile(f):
            raise SystemExit(f"bench: {f}: no such file")
        warm(f)
    # `python -m` puts the working folder first on sys.path: run in the tree measured
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")]))}
    py = [sys.executable, "-m", "clef_prof"]
    cmds = {"analyze A": ([*py, "analyze", args.a, "-f", "json"], env),
            "analyze B": ([*py, "analyze", args.b, "-f", "json"], env)}
    for j in args.jobs.split(","):
        cmd = [*py, "compare", "--arm", f"main={args.a}", "--arm", f"pr={args.b}", "-f", "json",
               *([] if j == "auto" else ["--jobs", j])]
        for pool in ["threads"] if j == "1" else args.pools.split(","):
            label = f"compare --jobs {j}" + ("" if j == "1" else f", {pool}")
            cmds[label] = (cmd, {**env, "CLEF_PROF_POOL": pool})
    names = list(cmds)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for i in range(args.repeat):
        for n in names[i % len(names):] + names[:i % len(names)]:      # a rotating order
            runs[n].append(run(*cmds[n], args.interval, tree))
    res = {n: summary(r) for n, r in runs.items()}
    one = max(res["analyze A"]["largest_mb"], res["analyze B"]["largest_mb"])
    wall_a = res["analyze A"]["wall_s"]
    sizes = [os.path.getsize(f) / MB for f in (args.a, args.b)]
    cpus = len(os.sched_getaffinity(0))
    print(f"A {Path(args.a).name} {sizes[0]:,.0f} MB, B {Path(args.b).name} {sizes[1]:,.0f} MB; "
          f"{cpus} usable CPUs; {args.repeat} runs each (median wall, largest peaks)\n")
    print("| command | wall s | ÷ analyze A | processes | largest process MB | ÷ analyze | process tree MB | ÷ analyze |")
    print("|---|---|---|---|---|---|---|---|")
    for n, s in res.items():
        print(f"| `{n}` | {s['wall_s']:.2f} | {s['wall_s'] / wall_a:.2f} | {s['processes']} | {s['largest_mb']:,.0f} | "
              f"{s['largest_mb'] / one:.2f} | {s['tree_mb']:,.0f} | {s['tree_mb'] / one:.2f} |")
    if args.json:
        doc = {"a": args.a, "b": args.b, "bytes": [os.path.getsize(args.a), os.path.getsize(args.b)],
               "cpus": cpus, "python": platform.python_version(), "summary": res, "runs": runs,
               "analyze_peak_mb": one}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
