"""Per-call cost of clef-prof's annotations, with no profiler attached and under nsys.

    python benchmarks/bench_annotate.py                  # no profiler, then under nsys 2023.4
    python benchmarks/bench_annotate.py --no-nsys        # no profiler only
    python benchmarks/bench_annotate.py --nsys PATH      # a given nsys binary

Each figure is the best of several timed loops, in ns per iteration, with the cost of an
empty loop iteration subtracted. Time is the calling thread's CPU time (time.thread_time_ns),
what the annotated thread pays, and steadier than wall time on a busy machine; --clock wall
uses perf_counter_ns. "bare" rows are the yardsticks: an empty `with` on a minimal Python
context manager and a call of an empty function. When the `nvtx` package is importable
(run the script with another venv's python), its `with nvtx.annotate(...)` is timed too.
Under nsys every range is recorded (-t nvtx,osrt), and the run checks that they all landed.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import clef_prof  # noqa: E402
from clef_prof.annotate import api as annotate, nvtx_client  # noqa: E402


class _Null:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _empty():
    pass


def _cases():
    null = _Null()
    s = clef_prof.stage("x")
    stage = clef_prof.stage
    push, pop = annotate.push, annotate.pop
    batch = clef_prof.batch

    @clef_prof.stage("deco")
    def decorated():
        pass

    def loop(n):
        for _ in range(n):
            pass

    def bare_with(n):
        for _ in range(n):
            with null:
                pass

    def bare_call(n):
        for _ in range(n):
            _empty()

    def with_cached(n):
        for _ in range(n):
            with s:
                pass

    def with_stage(n):
        for _ in range(n):
            with stage("x"):
                pass

    def push_pop(n):
        for _ in range(n):
            push("x")
            pop()

    def deco_call(n):
        for _ in range(n):
            decorated()

    def with_batch(n):
        for _ in range(n):
            with batch(n=8):
                pass

    request, enqueued = clef_prof.request, clef_prof.enqueued

    @clef_prof.request(lambda rid: rid)
    def handler(rid):
        pass

    def with_request(n):
        for _ in range(n):
            with request("r-12345678"):
                pass

    def mark_enqueued(n):
        for _ in range(n):
            enqueued("r-12345678")

    def request_call(n):
        for _ in range(n):
            handler("r-12345678")

    # (label, loop, clef_prof ranges per iteration)
    cases = [("bare: with _Null()", bare_with, 0), ("bare: empty function call", bare_call, 0),
             ("with S  (S = stage('x'))", with_cached, 1), ("with stage('x')", with_stage, 1),
             ("push('x'); pop()", push_pop, 1), ("@stage function call", deco_call, 1),
             ("with batch(n=8)", with_batch, 1), ("with request(rid)", with_request, 1),
             ("enqueued(rid)  (a mark)", mark_enqueued, 0), ("@request(id from args) call", request_call, 1)]
    try:
        import nvtx
        from importlib.metadata import version
    except ImportError:
        return loop, cases
    ann = nvtx.annotate("y", domain="nvtx-pkg")

    def with_nvtx(n):
        for _ in range(n):
            with ann:
                pass
    return loop, cases + [(f"with nvtx.annotate  ({version('nvtx')})", with_nvtx, 0)]


CLOCKS = {"thread": time.thread_time_ns, "wall": time.perf_counter_ns}


def _best(fn, n: int, repeat: int, clock) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = clock()
        fn(n)
        best = min(best, (clock() - t) / n)
    return best


def run_inner(n: int, repeat: int, clock: str) -> int:
    loop, cases = _cases()
    clk = CLOCKS[clock]
    base = _best(loop, n, repeat, clk)
    print(f"nvtx_client.enabled() = {nvtx_client.enabled()}   (n = {n}, best of {repeat}, {clock} clock; "
          f"empty loop iteration {base:.1f} ns, subtracted)")
    ranges = 0
    for label, fn, per_iter in cases:
        ns = _best(fn, n, repeat, clk) - base
        ranges += per_iter * n * repeat
        print(f"  {label:34s} {ns:8.1f} ns")
    print(f"clef_prof ranges emitted: {ranges}")
    return ranges


def run_under_nsys(nsys: str, n: int, repeat: int, clock: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "bench")
        cmd = [nsys, "profile", "-t", "nvtx,osrt", "-s", "none", "--cpuctxsw=none", "-o", rep,
               "--force-overwrite", "true", sys.executable, __file__, "--inner", "-n", str(n),
               "--repeat", str(repeat), "--clock", clock]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        print("".join(line + "\n" for line in out.splitlines()
                      if line.startswith(("nvtx_client", "  ", "clef_prof"))), end="")
        subprocess.run([nsys, "export", "--type", "sqlite", "-o", rep + ".sqlite", "--force-overwrite",
                        "true", rep + ".nsys-rep"], capture_output=True, check=True)
        db = sqlite3.connect(rep + ".sqlite")
        try:
            got = db.execute("SELECT count(*) FROM NVTX_EVENTS e JOIN NVTX_EVENTS d ON d.eventType = 75 "
                             "AND d.domainId = e.domainId AND d.text = 'clef' WHERE e.eventType = 59").fetchone()[0]
        except sqlite3.OperationalError as e:
            got = (f"none ({e}): nsys lost the whole NVTX stream, which it does at times for captures "
                   f"of very many back-to-back ranges on a busy machine; rerun, or lower -n")
        print(f"clef_prof ranges recorded by nsys: {got}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=None, help="iterations per timed loop")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="thread")
    ap.add_argument("--nsys", default=str(ROOT / ".nsys" / "2023.4" / "nsys"))
    ap.add_argument("--no-nsys", action="store_true")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        run_inner(a.n or 10_000, a.repeat, a.clock)
        return
    print("== no profiler attached")
    run_inner(a.n or 1_000_000, a.repeat, a.clock)
    if not a.no_nsys:
        if not os.access(a.nsys, os.X_OK):
            sys.exit(f"no nsys at {a.nsys} (run scripts/install-nsys.sh, or pass --no-nsys)")
        print(f"== under {subprocess.run([a.nsys, '--version'], capture_output=True, text=True).stdout.strip()}"
              " (nsys profile -t nvtx,osrt)")
        run_under_nsys(a.nsys, a.n or 10_000, a.repeat, a.clock)


if __name__ == "__main__":
    main()
