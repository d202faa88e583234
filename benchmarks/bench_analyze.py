#!/usr/bin/env python3
"""How fast and lean is `clef-prof analyze` on big captures, against the floor and against nsys?

    python benchmarks/bench_analyze.py --source gpu-q1c16-main.sqlite --sizes 100M,1G,4G
    python benchmarks/bench_analyze.py --files a.sqlite b.sqlite          # existing exports
    python benchmarks/bench_analyze.py --source SRC --tiles 4 --repeat 1  # the CI smoke run

For each export (made by benchmarks/scale_export.py from --source, or given), on the same file,
with the file in the page cache:

  a  the floor: a bare SELECT of the columns analyze reads, table by table, one thread.
     a_scan: C-level `SELECT total(col), ... FROM t` (SQLite decodes every value, nothing
     leaves C); a_scan2: the same split in two rowid ranges per table, on two connections
     and threads (the floor of two cores); a_adbc: the same columns fetched into Arrow
     through ADBC, one thread (what any Python reader pays to get them out of SQLite). All
     in this process.
  b  `python -m clef_prof analyze FILE -f json` in a fresh process (interpreter start and
     imports included; `startup` is that part alone), wall time, CPU time and peak RSS
     (os.wait4).
  c  `nsys stats -r nvtx_gpu_proj_trace,cuda_gpu_trace -f csv -o - FILE` (the nsys reports
     that compute the same projection), stdout discarded; wall, CPU, peak RSS.

It prints a Markdown table (sizes, times, b/a, c/b, RSS, the load average) and the exponent p
of time ~ size^p fitted over the sizes, and writes everything as JSON (--json). a and b are
interleaved: each of --repeat rounds runs every one of them once, so that a load change on a
shared machine meets them alike; each timing is the best of the rounds, and the per-round
ratios b/a are kept too. The CPU times are given, because wall times on a shared machine
include waiting for a core (the load average of each run is recorded). No timing is asserted
here: the CI runs this on a small tiling only to keep it working.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import scale_export  # noqa: E402

NSYS_REPORTS = "nvtx_gpu_proj_trace,cuda_gpu_trace"

# the columns `analyze` reads (capture.py / nvtx.py / cuda.py), per table; absent ones are skipped
FLOOR_COLUMNS = {
    "NVTX_EVENTS": ["start", "end", "eventType", "globalTid", "endGlobalTid", "textId", "domainId", "int64Value",
                    "uint64Value", "int32Value", "uint32Value"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "globalPid", "correlationId"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "globalPid", "correlationId", "bytes", "copyKind", "srcKind",
                                   "dstKind", "copyCount"],
    "CUPTI_ACTIVITY_KIND_MEMSET": ["start", "end", "globalPid", "correlationId"],
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ["start", "end", "globalPid", "correlationId"],
}


def _uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def floor_columns(path: str) -> dict[str, list[str]]:
    con = sqlite3.connect(_uri(path), uri=True)
    out = {}
    for table, cols in FLOOR_COLUMNS.items():
        have = {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}
        keep = [c for c in cols if c in have]
        if keep:
            out[table] = keep
    con.close()
    return out


def _scan(path: str, jobs: list[tuple[str, list[str], str]]) -> int:
    """Run `SELECT count(*), total(col), ... FROM t WHERE ...` for each job on one connection."""
    con = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
    rows = 0
    for table, cols, where in jobs:
        aggs = ", ".join(f'total("{c}")' for c in cols)
        rows += int(con.execute(f'SELECT count(*), {aggs} FROM "{table}" {where}').fetchone()[0])
    con.close()
    return rows


def measure_scan(path: str, threads: int = 1) -> dict:
    """a_scan: every needed value decoded by SQLite, summed in C; with `threads` > 1, each table
    split into that many rowid ranges, each range on its own connection and thread (SQLite runs
    without the GIL), the two-thread floor of a 2-core machine."""
    cols = floor_columns(path)
    con = sqlite3.connect(_uri(path), uri=True)
    ranges = {t: con.execute(f'SELECT min(rowid), max(rowid) FROM "{t}"').fetchone() for t in cols}
    con.close()
    parts: list[list] = [[] for _ in range(threads)]
    for t, c in cols.items():
        lo, hi = ranges[t]
        if lo is None:
            continue
        step = -(-(hi - lo + 1) // threads)
        for i in range(threads):
            parts[i].append((t, c, f"WHERE rowid >= {lo + i * step} AND rowid < {lo + (i + 1) * step}"
                             if threads > 1 else ""))
    w0, c0 = time.perf_counter(), _cpu()
    if threads == 1:
        rows = _scan(path, parts[0])
    else:
        with ThreadPoolExecutor(threads) as pool:
            rows = sum(pool.map(lambda p: _scan(path, p), parts))
    return {"wall_s": time.perf_counter() - w0, "cpu_s": _cpu() - c0, "rows": rows}


def measure_adbc(path: str) -> dict | None:
    """a_adbc: the same columns into Arrow record batches through ADBC (then dropped)."""
    try:
        import adbc_driver_sqlite.dbapi as adbc
    except ImportError:
        return None
    conn = adbc.connect(_uri(path))
    w0, c0 = time.perf_counter(), _cpu()
    rows = 0
    for table, cols in floor_columns(path).items():
        cur = conn.cursor()
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(1 << 16)})
        cur.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM \"{table}\"")
        reader = cur.fetch_record_batch()
        for batch in reader:
            rows += batch.num_rows
        cur.close()
    out = {"wall_s": time.perf_counter() - w0, "cpu_s": _cpu() - c0, "rows": rows}
    conn.close()
    return out


# Runs one command and reports its wall time, CPU and peak RSS. It runs in a small process of
# its own: Linux carries the RSS high-water mark of the process that execs into the new
# program's ru_maxrss, so a command started straight from this (large) process would report
# at least this process's size.
_WRAPPER = r"""
import json, os, subprocess, sys, time
cmd = json.loads(sys.argv[1])
w0 = time.perf_counter()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, ru = os.wait4(p.pid, 0)
wall = time.perf_counter() - w0
print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
                  "rc": os.waitstatus_to_exitcode(status), "stderr": err.decode(errors="replace")[-2000:]}))
"""


def run_child(cmd: list[str], env=None, cwd: str | None = None) -> dict:
    """Run a command; wall time, CPU (it and the children it waited for) and peak RSS."""
    load = os.getloadavg()[0]
    p = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(cmd)], capture_output=True, text=True, env=env,
                       cwd=cwd)
    if p.returncode != 0:
        raise SystemExit(f"bench: could not run {cmd}: {p.stderr[-2000:]}")
    out = json.loads(p.stdout)
    out["load"] = load
    return out


def best(runs: list[dict]) -> dict:
    """The fastest run, with the largest RSS of all runs."""
    b = dict(min(runs, key=lambda r: r["wall_s"]))
    b["cpu_s"] = min(r["cpu_s"] for r in runs)
    if all("rss_mb" in r for r in runs):
        b["rss_mb"] = max(r["rss_mb"] for r in runs)
    b["runs"] = len(runs)
    return b


def warm(path: str) -> None:
    """Read the file once so that every measurement finds it in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def find_nsys(given: str | None) -> str | None:
    for cand in ([given] if given else []) + [str(ROOT / ".nsys" / "2023.4" / "nsys"), shutil.which("nsys")]:
        if cand and os.path.exists(cand):
            return cand
    return None


def bench_file(path: str, repeat: int, nsys: str | None, envs: dict[str, dict], tmp: str,
               repeat_nsys: int | None = None) -> dict:
    """Every measurement of one file, interleaved: each round runs the one-thread floor, the
    two-thread floor, the ADBC fetch and analyze (once per tree in `envs`, label -> environment)
    once, so that a load change on a shared machine meets all of them alike; best of `repeat`
    rounds each, and the per-round ratios. `b` is the first tree's analyze."""
    size = os.path.getsize(path)
    warm(path)
    rec: dict = {"file": path, "bytes": size, "mb": size / 1e6}
    out_json = os.path.join(tmp, "analyze.json")
    scans, scans2, adbc = [], [], []
    runs: dict[str, list] = {label: [] for label in envs}
    for _ in range(repeat):
        scans.append(measure_scan(path))
        scans2.append(measure_scan(path, threads=2))
        adbc.append(measure_adbc(path))
        for label, env in envs.items():
            r = run_child([sys.executable, "-m", "clef_prof", "analyze", path, "-f", "json", "-o", out_json], env=env,
                          cwd=tmp)
            if r["rc"] != 0:
                raise SystemExit(f"analyze ({label}) failed on {path} (exit {r['rc']}): {r['stderr']}")
            r.pop("stderr", None)
            runs[label].append(r)
    rec["a_scan"] = best(scans)
    rec["a_scan2"] = best(scans2)
    rec["a_adbc"] = best(adbc) if adbc[0] is not None else None
    rec["trees"] = {}
    for label, rs in runs.items():
        b = best(rs)
        rec["trees"][label] = {**b, "b_over_a": b["wall_s"] / rec["a_scan"]["wall_s"],
                               "b_over_a2": b["wall_s"] / rec["a_scan2"]["wall_s"],
                               "b_over_a_cpu": b["cpu_s"] / rec["a_scan"]["cpu_s"],
                               "b_over_a_rounds": [x["wall_s"] / a["wall_s"] for a, x in zip(scans, rs)]}
    rec["b"] = rec["trees"][next(iter(envs))]
    rec["b_over_a_rounds"] = rec["b"]["b_over_a_rounds"]
    rec["load"] = [r["load"] for rs in runs.values() for r in rs]
    res = json.loads(Path(out_json).read_text())
    rec["analyze"] = {"requests": res["requests"], "batches": res["batches"],
                      "h2d_copies": res["totals"]["h2d_copies"], "kernel_launches": res["totals"]["kernel_launches"],
                      "warnings": len(res["warnings"])}
    if nsys:
        runs = []
        for _ in range(repeat_nsys or repeat):
            r = run_child([nsys, "stats", "-r", NSYS_REPORTS, "-f", "csv", "-o", "-", path])
            if r["rc"] != 0:
                raise SystemExit(f"nsys stats failed on {path} (exit {r['rc']}): {r['stderr']}")
            runs.append(r)
        rec["c"] = best(runs)
    else:
        rec["c"] = None
    a, b, c = rec["a_scan"], rec["b"], rec["c"]
    rec["b_over_a"] = b["wall_s"] / a["wall_s"]
    rec["b_over_a2"] = b["wall_s"] / rec["a_scan2"]["wall_s"]
    rec["b_over_a_cpu"] = b["cpu_s"] / a["cpu_s"]
    rec["b_over_a_adbc"] = b["wall_s"] / rec["a_adbc"]["wall_s"] if rec["a_adbc"] else None
    rec["c_over_b"] = c["wall_s"] / b["wall_s"] if c else None
    rec["c_over_b_cpu"] = c["cpu_s"] / b["cpu_s"] if c else None
    for r in (rec["a_scan"], rec["a_scan2"], rec["a_adbc"], b, c):
        if r:
            r.pop("stderr", None)
    return rec


def exponent(sizes: list[float], times: list[float]) -> float | None:
    """p in time ~ size^p, least squares on logs (None with fewer than two sizes)."""
    pts = [(math.log(s), math.log(t)) for s, t in zip(sizes, times) if s > 0 and t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


def table(recs: list[dict], fits: dict) -> str:
    def f(v, fmt="{:.2f}"):
        return "—" if v is None else fmt.format(v)

    lines = ["| export | a: floor scan s, 1 thread (2 threads; ADBC) | b: analyze s (startup s) | b CPU s | b/a | "
             "b/a (2 threads) | b/a CPU | c: nsys stats s | c/b | analyze peak RSS MB | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        c = r["c"]
        for i, (label, b) in enumerate(r["trees"].items()):
            name = f"{r['mb']:,.0f} MB" + (f" {label}" if len(r["trees"]) > 1 else "")
            lines.append(
                f"| {name} | {f(r['a_scan']['wall_s'])} ({f(r['a_scan2']['wall_s'])}; "
                f"{f(r['a_adbc'] and r['a_adbc']['wall_s'])}) | "
                f"{f(b['wall_s'])} ({f(r.get('startup_s'))}) | {f(b['cpu_s'])} | {f(b['b_over_a'])} | "
                f"{f(b['b_over_a2'])} | {f(b['b_over_a_cpu'])} | {f(c and c['wall_s'], '{:.1f}') if i == 0 else '—'} | "
                f"{f(c and c['wall_s'] / b['wall_s'], '{:.1f}')} | {b['rss_mb']:,.0f} | "
                f"{min(r['load']):.1f}–{max(r['load']):.1f} |")
    if fits:
        lines.append("")
        lines.append("time ~ size^p over the sizes: " + ", ".join(f"{k} p = {f(v)}" for k, v in fits.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--source", help="an nsys export to scale (e.g. gpu-q1c16-main.sqlite)")
    src.add_argument("--files", nargs="+", help="existing exports to measure as they are")
    p.add_argument("--sizes", default="100M,1G,4G", help="target sizes for --source (default 100M,1G,4G)")
    p.add_argument("--tiles", help="tile counts for --source instead of sizes, e.g. 4 or 2,8")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "clef-bench"),
                   help="where scaled exports are written (default /tmp/clef-bench)")
    p.add_argument("--keep", action="store_true", help="keep the scaled exports (default: delete them at the end)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept (default 3)")
    p.add_argument("--repeat-nsys", type=int, help="runs of (c) (default: --repeat; nsys stats takes minutes on GBs)")
    p.add_argument("--nsys", help="nsys binary for (c) (default .nsys/2023.4/nsys, then PATH)")
    p.add_argument("--no-nsys", action="store_true", help="skip (c)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--tree", action="append", help="run analyze from this source tree (LABEL=PATH); give it twice "
                   "or more to time trees side by side in every round (default: this tree)")
    args = p.parse_args(argv)
    from trees import parse_trees, tree_env

    envs = {label: tree_env(root) for label, root in parse_trees(args.tree).items()}

    nsys = None if args.no_nsys else find_nsys(args.nsys)
    if not args.no_nsys and nsys is None:
        print("bench: nsys not found, (c) skipped (install with scripts/install-nsys.sh)", file=sys.stderr)
    for env in envs.values():
        run_child([sys.executable, "-c", "import clef_prof.cli.app, clef_prof.analyze.pipeline, clef_prof.explore.text"],
                  env=env)
    env = next(iter(envs.values()))
    made: list[str] = []
    if args.files:
        files = args.files
    else:
        os.makedirs(args.workdir, exist_ok=True)
        stem = Path(args.source).name.split(".")[0]
        specs = ([("tiles", int(t)) for t in args.tiles.split(",")] if args.tiles else
                 [("size", s) for s in args.sizes.split(",")])
        files = []
        for kind, v in specs:
            out = os.path.join(args.workdir, f"{stem}-{'x' + str(v) if kind == 'tiles' else v}.sqlite")
            print(f"bench: writing {out}", file=sys.stderr)
            if kind == "tiles":
                scale_export.scale(args.source, out, tiles=v, quiet=True)
            else:
                scale_export.scale(args.source, out, size=scale_export.parse_size(v), quiet=True)
            made.append(out)
            files.append(out)
    recs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            startup = best([run_child([sys.executable, "-c", "import clef_prof.cli.app, clef_prof.analyze.pipeline"], env=env)
                            for _ in range(args.repeat)])
            for f in files:
                print(f"bench: measuring {f} ({os.path.getsize(f) / 1e6:,.0f} MB)", file=sys.stderr)
                rec = bench_file(f, args.repeat, nsys, envs, tmp, args.repeat_nsys)
                rec["startup_s"] = startup["wall_s"]
                recs.append(rec)
                print(f"  a {rec['a_scan']['wall_s']:.2f} s  b {rec['b']['wall_s']:.2f} s "
                      f"({rec['b']['rss_mb']:.0f} MB)  c {rec['c']['wall_s'] if rec['c'] else float('nan'):.2f} s",
                      file=sys.stderr)
    finally:
        if not args.keep:
            for f in made:
                if os.path.exists(f):
                    os.remove(f)
    sizes = [r["bytes"] for r in recs]
    fits = {}
    if len(recs) >= 2:
        fits = {"a": exponent(sizes, [r["a_scan"]["wall_s"] for r in recs]),
                "b": exponent(sizes, [r["b"]["wall_s"] for r in recs]),
                "b_minus_startup": exponent(sizes, [r["b"]["wall_s"] - r["startup_s"] for r in recs]),
                "b_cpu": exponent(sizes, [r["b"]["cpu_s"] for r in recs]),
                "b_rss": exponent(sizes, [r["b"]["rss_mb"] for r in recs]),
                "c": exponent(sizes, [r["c"]["wall_s"] if r["c"] else None for r in recs]) if nsys else None}
    text = table(recs, fits)
    print(text)
    if args.json:
        doc = {"schema": "clef-prof/bench-analyze/1", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                                  "platform": platform.platform()},
               "nsys": nsys, "repeat": args.repeat, "repeat_nsys": args.repeat_nsys or args.repeat, "startup": startup, "results": recs, "exponents": fits,
               "markdown": text}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
