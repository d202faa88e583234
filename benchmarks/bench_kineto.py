"""Reading a big PyTorch profiler (Kineto) trace: clef-prof's streaming reader against a plain
`json.load` of the same file, and ijson (C backend) and HTA's parser when installed.

A seed trace (a real one: `--seed TRACE`, e.g. tests/data/kineto-*.pt.trace.json.xz decompressed)
is tiled to `--mb` megabytes of JSON: its events repeated with shifted timestamps and
correlation ids, as a long capture of the same server would hold them. Each reader runs in its
own process (time and peak RSS from the child's rusage, so one reader's garbage does not count
against the next):

    PYTHONPATH=$PWD python3 benchmarks/bench_kineto.py --seed trace.json --mb 500

Prints one line per reader: seconds, peak RSS MiB, and both as a ratio to json.load.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

READERS = {
    "json.load": "import json; d = json.load(open(P)); n = len(d['traceEvents'])",
    "clef-prof (stream)": "from clef_prof.analyze.kineto import read_file; f = read_file(P); n = f.events",
    "ijson yajl2_c": ("import ijson; n = sum(1 for _ in ijson.items(open(P, 'rb'), 'traceEvents.item', "
                      "use_float=True))"),
    "ijson yajl2_c (Decimal: exact)": "import ijson; n = sum(1 for _ in ijson.items(open(P, 'rb'), 'traceEvents.item'))",
    "clef-prof (full conversion)": ("import tempfile, os; from clef_prof.analyze.kineto import convert; "
                                    "d = tempfile.mkdtemp(); convert([P], os.path.join(d, 'x.sqlite'), P); n = 0"),
    "HTA parse_trace_file": "from hta.common.trace import parse_trace_file; parse_trace_file(P); n = 0",
}


def tile(seed: str, out: str, mb: int) -> int:
    """Write `seed`'s events repeated (timestamps and correlation ids shifted) until `mb` MB."""
    opener = gzip.open if seed.endswith(".gz") else open
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


def run(name: str, path: str) -> tuple[float, float] | None:
    code = (f"import time, resource; P = {path!r}; t0 = time.perf_counter(); {READERS[name]}; "
            "print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    s, rss = p.stdout.split()
    return float(s), int(rss) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", required=True, help="a real Kineto trace (.json or .json.gz) to tile")
    ap.add_argument("--mb", type=int, default=500, help="size of the tiled JSON, MB (default 500)")
    ap.add_argument("--keep", help="write the tiled trace here and keep it")
    args = ap.parse_args()
    out = args.keep or os.path.join(tempfile.mkdtemp(), "tiled.json")
    t0 = time.perf_counter()
    reps = tile(args.seed, out, args.mb)
    print(f"tiled {args.seed} x{reps} into {os.path.getsize(out) / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s")
    base = None
    for name in READERS:
        r = run(name, out)
        if r is None:
            print(f"{name:30s} not installed or failed")
            continue
        if base is None:
            base = r
        print(f"{name:30s} {r[0]:7.2f} s {r[1]:8.0f} MiB peak RSS   x{r[0] / base[0]:.2f} time  "
              f"x{r[1] / base[1]:.2f} memory of json.load")
    if not args.keep:
        os.remove(out)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
