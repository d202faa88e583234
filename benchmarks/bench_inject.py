"""What `clef-prof inject` costs a program that runs with no profiler attached.

    python benchmarks/bench_inject.py                       # this tree
    python benchmarks/bench_inject.py --clef-prof ../old/clef_prof   # another copy, to compare

A generated script (a target function and an `lru_cache` target defined in the main module,
then a loop of --loop iterations at its top level, then --calls calls of the lru_cache target
and as many of the function target, all at the top level) runs --repeat times plainly and
--repeat times under inject's environment form (the hook that `clef-prof inject -- CMD`
installs), the two arms interleaved. The script times itself in its thread's CPU time
(time.thread_time: steadier than wall time on a shared machine); each figure is the best of
the runs. Printed: seconds for the top-level loop and the slowdown, and ns per call of each
target (the lru_cache one a cache hit), plain and wrapped, and the difference.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = '''\
import functools, json, sys, time

def target(x):
    return x

@functools.lru_cache(maxsize=None)
def cached(x):
    return x

LOOP, CALLS = int(sys.argv[1]), int(sys.argv[2])
t0 = time.thread_time()
total = 0
for i in range(LOOP):
    total += i
loop_s = time.thread_time() - t0
cached(1)
t0 = time.thread_time()
for _ in range(CALLS):
    cached(1)
call_s = time.thread_time() - t0
t0 = time.thread_time()
for _ in range(CALLS):
    target(1)
func_s = time.thread_time() - t0
print(json.dumps({"loop_s": loop_s, "call_ns": call_s / CALLS * 1e9, "func_ns": func_s / CALLS * 1e9,
                  "wrapped": hasattr(cached, "__clef_prof__") and hasattr(target, "__clef_prof__"),
                  "cache_info": hasattr(cached, "cache_info")}))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loop", type=int, default=2_000_000, help="iterations of the top-level loop")
    ap.add_argument("--calls", type=int, default=1_000_000, help="calls of the lru_cache target")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each arm (the best is kept)")
    ap.add_argument("--clef-prof", default=str(ROOT / "clef_prof"), help="the clef_prof package to inject with")
    a = ap.parse_args()
    pkg = Path(a.clef_prof).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-inject-") as tmp:
        prog, spec = Path(tmp) / "prog.py", Path(tmp) / "spec.toml"
        prog.write_text(PROGRAM)
        spec.write_text('[stages]\nparse = "prog.py:target"\nhead = "prog.py:cached"\n')
        base = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_") and k != "PYTHONPATH"}
        injected = {**base, "CLEF_PROF_SPEC": str(spec), "CLEF_PROF_PKG": str(pkg),
                    "PYTHONPATH": str(pkg / "annotate" / "_startup")}
        runs: dict[str, list] = {"plain": [], "inject": []}
        for _ in range(a.repeat):          # the arms interleaved, so that a change of load hits both
            for arm, env in (("plain", base), ("inject", injected)):
                p = subprocess.run([sys.executable, str(prog), str(a.loop), str(a.calls)], env=env, cwd=tmp,
                                   capture_output=True, text=True, timeout=3600)
                if p.returncode:
                    sys.exit(f"bench_inject: the {arm} run failed: {p.stderr.strip().splitlines()[-1:]}")
                runs[arm].append(json.loads(p.stdout))
        if not runs["inject"][0]["wrapped"]:
            sys.exit("bench_inject: the targets were not wrapped under inject")
        best = {arm: {k: min(r[k] for r in rs) for k in ("loop_s", "call_ns", "func_ns")} for arm, rs in runs.items()}
    plain, inj = best["plain"], best["inject"]
    print(f"clef_prof: {pkg}; python {sys.version.split()[0]}; best of {a.repeat} runs per arm")
    print(f"top-level loop of {a.loop:,} iterations: plain {plain['loop_s']:.3f} s, under inject "
          f"{inj['loop_s']:.3f} s per run: {inj['loop_s'] / plain['loop_s']:.2f}x")
    print(f"lru_cache target, cache hit: plain {plain['call_ns']:.0f} ns per call, wrapped {inj['call_ns']:.0f} ns "
          f"per call (+{inj['call_ns'] - plain['call_ns']:.0f} ns per call, no profiler attached)")
    print(f"plain function target: plain {plain['func_ns']:.0f} ns per call, wrapped {inj['func_ns']:.0f} ns per "
          f"call (+{inj['func_ns'] - plain['func_ns']:.0f} ns per call, no profiler attached)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
