"""Reading a big PyTorch profiler (Kineto) trace: clef-prof's streaming reader against a plain
`json.load` of the same file, ijson (C backend) and HolisticTraceAnalysis' parser, when installed.

A seed trace (a real one: `--seed TRACE`, e.g. tests/data/kineto-demo-pr.pt.trace.json.xz)
is tiled to `--mb` megabytes of JSON: its events repeated with shifted timestamps and
correlation ids, as a long capture of the same server would hold them (`--gz` also writes it
gzip-compressed, as Kineto's `.pt.trace.json.gz`, and reads both). Each reader runs in its own
process (time, and peak RSS from the child's VmHWM, so one reader's garbage does not count
against the next), `--repeat` times; the median of each is printed:

    PYTHONPATH=$PWD python3 benchmarks/bench_kineto.py --seed trace.json --mb 500 --repeat 2

HTA (`pip install HolisticTraceAnalysis ijson`, e.g. in a venv made with
--system-site-packages; `--python /tmp/hta-venv/bin/python` runs the readers there) is read with
its own entry point `hta.common.trace.parse_trace_file`, the per-rank parse that
`TraceAnalysis(trace_dir=...)` runs, once with its default backend (json) and once with its
streaming one (ijson, batched, args compressed on the fly). Readers that are not installed
are said so and skipped.

Prints one line per reader: wall and CPU seconds (CPU time is the steadier figure on a shared
machine), peak RSS MiB, and each as a ratio to json.load.
"""
from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# peak RSS of this process's own memory (kB): VmHWM, not ru_maxrss, which on Linux keeps the
# parent's RSS at the fork (the parent holds the seed trace it tiled)
HWM = "hwm = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"
OPEN = "import gzip; O = gzip.open if P.endswith('.gz') else open"
HTA = "from hta.common.trace import parse_trace_file; from hta.configs.parser_config import ParserConfig, ParserBackend"
READERS = {
    "json.load": "import json; d = json.load(O(P, 'rb')); n = len(d['traceEvents'])",
    "clef-prof (stream)": "from clef_prof.analyze.read.kineto import read_file; f = read_file(P); n = f.events",
    "clef-prof (full conversion)": ("import tempfile, os; from clef_prof.analyze.read.kineto import convert; "
                                    "d = tempfile.mkdtemp(); convert([P], os.path.join(d, 'x.sqlite'), P); n = 0"),
    "ijson yajl2_c (floats)": ("import ijson; n = sum(1 for _ in ijson.items(O(P, 'rb'), 'traceEvents.item', "
                               "use_float=True))"),
    "ijson yajl2_c (Decimal: exact)": "import ijson; n = sum(1 for _ in ijson.items(O(P, 'rb'), 'traceEvents.item'))",
    "HTA parse_trace_file (json)": (f"{HTA}; c = ParserConfig(); c.set_parser_backend(ParserBackend.JSON); "
                                    "m, df, st = parse_trace_file(P, c); n = len(df)"),
    "HTA parse_trace_file (ijson)": (f"{HTA}; c = ParserConfig(); "
                                     "c.set_parser_backend(ParserBackend.IJSON_BATCH_AND_COMPRESS); "
                                     "m, df, st = parse_trace_file(P, c); n = len(df)"),
}


def tile(seed: str, out: str, mb: int) -> int:
    """Write `seed`'s events repeated (timestamps and correlation ids shifted) until `mb` MB."""
    opener = gzip.open if seed.endswith(".gz") else lzma.open if seed.endswith(".xz") else open
    with opener(seed, "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    t = [e.get("ts") for e in events if isinstance(e.get("ts"), (int, float))]
    span = (max(t) - min(t) + 1000.0) if t else 1000.0
    corr_top = max((e.get("args", {}).get("correlation", 0) for e in events if isinstance(e.get("args"), dict)),
                   default=0) + 1
    written = 0
    with open(out, "w") as fh:
        head = json.dumps(doc)[:-1]
        fh.write(head + (", " if doc else "") + '"traceEvents": [\n')
        first = True
        rep = 0
        while written < mb << 20:
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = round(e2["ts"] + rep * span, 3)
                a = e2.get("args")
                if isinstance(a, dict) and "correlation" in a:
                    e2["args"] = {**a, "correlation": a["correlation"] + rep * corr_top}
                if e2.get("cat") == "ac2g" and "id" in e2:
                    e2["id"] = e2["id"] + rep * corr_top
                s = ("" if first else ",\n") + json.dumps(e2)
                first = False
                fh.write(s)
                written += len(s)
            rep += 1
        fh.write("\n]}\n")
    return rep


def run(python: str, name: str, path: str) -> tuple[float, float, float, int] | str:
    """One reader in a fresh process: (wall s, CPU s, peak RSS MiB, events or rows), or why it failed."""
    code = (f"import time, logging; logging.disable(logging.WARNING); P = {path!r}; {OPEN}; "
            f"t0, c0 = time.perf_counter(), time.process_time(); {READERS[name]}; "
            f"t, c = time.perf_counter() - t0, time.process_time() - c0; {HWM}; print(t, c, hwm, n)")
    p = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        return "not installed" if "ModuleNotFoundError" in last else f"failed: {last[:120]}"
    s, cpu, rss, n = p.stdout.split()[-4:]
    return float(s), float(cpu), int(rss) / 1024, int(n)


def bench(python: str, path: str, repeat: int, only: list[str] | None) -> None:
    print(f"{path}: {os.path.getsize(path) / 2**20:.0f} MiB; load average {os.getloadavg()[0]:.2f} at the start")
    base = None
    for name in READERS:
        if only and not any(o.lower() in name.lower() for o in only):
            continue
        runs = []
        for _ in range(repeat):
            r = run(python, name, path)
            if isinstance(r, str):
                break
            runs.append(r)
        if not runs:
            print(f"{name:32s} {r}")
            continue
        sec, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
        if name == "json.load":
            base = (sec, cpu, rss)
        each = ", ".join(f"{r[0]:.1f}" for r in runs)
        rel = (f"   x{sec / base[0]:.2f} time x{cpu / base[1]:.2f} CPU x{rss / base[2]:.2f} memory of json.load"
               if base else "")
        print(f"{name:32s} {sec:7.2f} s ({each}) {cpu:7.2f} CPU s {rss:7.0f} MiB peak RSS{rel}   "
              f"[{runs[0][3]} events/rows]", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", required=True, help="a real Kineto trace (.json, .json.gz or .json.xz) to tile, or "
                    "with --tiled a trace to read as it is")
    ap.add_argument("--mb", type=int, default=500, help="size of the tiled JSON, MB (default 500)")
    ap.add_argument("--tiled", action="store_true", help="the seed is already tiled: read it as it is")
    ap.add_argument("--gz", action="store_true", help="also write the tile gzip-compressed and read that too")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each reader (median printed; default 1)")
    ap.add_argument("--only", nargs="*", help="readers whose name contains one of these words (default all)")
    ap.add_argument("--python", default=sys.executable, help="interpreter the readers run in (e.g. a venv with HTA)")
    ap.add_argument("--keep", help="write the tiled trace here and keep it")
    args = ap.parse_args()
    if args.tiled:
        out, made = args.seed, []
    else:
        out = args.keep or os.path.join(tempfile.mkdtemp(), "tiled.json")
        t0 = time.perf_counter()
        reps = tile(args.seed, out, args.mb)
        print(f"tiled {args.seed} x{reps} into {os.path.getsize(out) / 2**20:.0f} MiB in "
              f"{time.perf_counter() - t0:.1f} s")
        made = [] if args.keep else [out]
    paths = [out]
    if args.gz:
        with open(out, "rb") as src, gzip.open(out + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst, 4 << 20)
        paths.append(out + ".gz")
        made.append(out + ".gz")
    try:
        for p in paths:
            bench(args.python, p, args.repeat, args.only)
    finally:
        for p in made:
            os.remove(p)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
