"""Virtual slowdowns ($CLEF_PROF_DELAY, clef_prof.annotate.delay): how accurate an injected spin
is, and what a stage costs per call with no delay asked and with a zero delay (the baseline of
`clef-prof whatif`, which times the stage without adding anything).

    python benchmarks/bench_delay.py               # 100 µs spin, 2000 calls; costs over 200000 calls
    python benchmarks/bench_delay.py --us 50 --calls 5000

Each mode runs in a fresh interpreter (the plan is read once, at import). Accuracy: per call the
injected time the wrapper counted and the wall time of the whole call (perf_counter_ns), against
the request; mean, p50, p99 and the worst call. Cost: best of 7 loops of `with stage(...)` and of a
decorated empty function, in ns per call, the empty loop subtracted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from clef_prof.annotate import api, delay
mode, n = sys.argv[2], int(sys.argv[3])
s = api.stage("head")
now = time.perf_counter_ns
if mode == "accuracy":
    walls, inj = [], []
    with s:
        pass
    c = delay._local.counts["head"]        # this thread's [calls, own_ns, injected_ns]
    for _ in range(n):
        i0 = c[2]; t0 = now()
        with s:
            pass
        walls.append(now() - t0); inj.append(c[2] - i0)
    print(json.dumps({"walls": walls, "injected": inj}))
else:
    @s
    def f():
        pass
    def loop_empty():
        t0 = now()
        for _ in range(n):
            pass
        return now() - t0
    def loop_with():
        t0 = now()
        for _ in range(n):
            with s:
                pass
        return now() - t0
    def loop_call():
        t0 = now()
        for _ in range(n):
            f()
        return now() - t0
    def bare():
        pass
    def loop_bare():
        t0 = now()
        for _ in range(n):
            bare()
        return now() - t0
    best = lambda g: min(g() for _ in range(7))
    e = best(loop_empty)
    print(json.dumps({"kind": type(s).__name__, "with_ns": (best(loop_with) - e) / n,
                      "call_ns": (best(loop_call) - e) / n, "bare_call_ns": (best(loop_bare) - e) / n}))
"""


def _child(mode: str, n: int, delay: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CLEF_PROF_DELAY", "CLEF_PROF_DELAY_STATS")}
    if delay:
        env["CLEF_PROF_DELAY"] = delay
    out = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT), mode, str(n)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--us", type=float, default=100.0, help="requested spin per call, µs (default 100)")
    p.add_argument("--calls", type=int, default=2000, help="delayed calls timed (default 2000)")
    p.add_argument("--cost-calls", type=int, default=200_000, help="calls per cost loop (default 200000)")
    a = p.parse_args()
    r = _child("accuracy", a.calls, f"head=spin:{a.us:g}us")
    want = a.us * 1000
    for name, xs in (("injected (counted)", r["injected"]), ("whole call (wall)", r["walls"])):
        mean = sum(xs) / len(xs)
        print(f"spin {a.us:g} us, {name}: mean {mean / 1000:.2f} us ({(mean / want - 1) * 100:+.2f}%), "
              f"p50 {_pct(xs, 50) / 1000:.2f} us, p99 {_pct(xs, 99) / 1000:.2f} us, "
              f"max {max(xs) / 1000:.2f} us over {len(xs)} calls")
    for label, spec in (("no delay asked", None), ("delay 0us (whatif baseline)", "head=spin:0us"),
                        ("delay on another stage", "other=spin:100us")):
        c = _child("cost", a.cost_calls, spec)
        print(f"{label} ({c['kind']}): with stage {c['with_ns']:.0f} ns/call, decorated call {c['call_ns']:.0f} "
              f"ns/call (a bare function call {c['bare_call_ns']:.0f} ns)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
