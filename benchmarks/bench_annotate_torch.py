"""clef-prof's annotations beside a PyTorch profiler: their per-range cost (stage, batch, request
range, enqueue mark) with torch not imported, with torch imported and no profiler on, and under
torch.profiler (where each range is also a record_function); and a check that the ranges land in
the profiler's trace with the same names and batch message, from the profiling thread and from a
thread started before the profiler.

    PYTHONPATH=$PWD python3 benchmarks/bench_annotate_torch.py [--baseline ROOT] [--out DIR]

--baseline ROOT times the same loops with the clef_prof of another checkout (today's code) in
the same runs, for the before/after comparison. Each figure is the best of --repeat loops of -n
iterations, thread CPU time, an empty loop's cost subtracted (as benchmarks/bench_annotate.py).
Without torch only the first row is measured.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading

CASES = r"""
import sys, time
mode, n, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode != "none":
    import torch
import clef_prof
S = clef_prof.stage("x")
batch = clef_prof.batch
def loop(k):
    for _ in range(k):
        pass
def with_stage(k):
    for _ in range(k):
        with S:
            pass
def with_batch(k):
    for _ in range(k):
        with batch(n=8):
            pass
request, enqueued = clef_prof.request, clef_prof.enqueued
def with_request(k):
    for _ in range(k):
        with request("r-12345678"):
            pass
def mark(k):
    for _ in range(k):
        enqueued("r-12345678")
def best(fn):
    b = float("inf")
    for _ in range(repeat):
        t = time.thread_time_ns(); fn(n); b = min(b, (time.thread_time_ns() - t) / n)
    return b
prof = None
if mode == "profiler":
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CPU]); prof.start()
    with batch(n=1):      # the profiler is looked up at each batch range
        pass
base = best(loop)
print(*(round(best(f) - base, 1) for f in (with_stage, with_batch, with_request, mark)))
if prof is not None:
    prof.stop()
"""


def timed(root: str, mode: str, n: int, repeat: int) -> tuple[float, ...] | None:
    env = dict(os.environ, PYTHONPATH=root)
    p = subprocess.run([sys.executable, "-c", CASES, mode, str(n), str(repeat)], capture_output=True, text=True,
                       env=env, cwd=root)
    if p.returncode != 0:
        print(f"  ({mode} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode})")
        return None
    return tuple(float(v) for v in p.stdout.split())


def check_emission(out_dir: str, all_threads: bool) -> dict:
    """Request ranges, enqueue marks, batches and stages from the profiling thread and from a thread
    started before the profiler; the trace must hold each of them as a user_annotation of the same
    name (the early thread's only with profile_all_threads)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import clef_prof
    from clef_prof.analyze.read.kineto import read_file

    go, done = threading.Event(), threading.Event()
    k = 50

    def work(tag: str) -> None:
        for i in range(k):
            with clef_prof.request(f"{tag}{i}"):
                clef_prof.enqueued(f"{tag}{i}")
            with clef_prof.batch(n=2, request_ids=[f"{tag}{i}", f"{tag}{i}b"]):
                with clef_prof.stage("parse"):
                    pass
                with clef_prof.stage("encode"):
                    torch.ones(4).sum()

    def early_thread() -> None:
        go.wait()
        work("t")
        done.set()

    th = threading.Thread(target=early_thread)
    th.start()                              # before the profiler: what profile_all_threads is for
    kw = {}
    cfg = getattr(torch.profiler, "_ExperimentalConfig", None)
    if cfg is not None and all_threads:
        try:
            kw["experimental_config"] = cfg(profile_all_threads=True)
        except TypeError:
            pass
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    path = os.path.join(out_dir, f"emission-{'all' if all_threads else 'plain'}.pt.trace.json.gz")
    with profile(activities=acts, **kw) as prof:
        go.set()
        work("m")
        done.wait(60)
    th.join()
    prof.export_chrome_trace(path)
    f = read_file(path)
    names = [r[4] for r in f.ranges]
    got = {"batches_main": sum(1 for n in names if n.startswith("pooler n=2 rid=m")),
           "batches_thread": sum(1 for n in names if n.startswith("pooler n=2 rid=t")),
           "parse": names.count("parse"), "encode": names.count("encode"), "threads": len({r[3] for r in f.ranges}),
           "requests": sum(1 for n in names if n.startswith("request rid=")),
           "enqueued": sum(1 for n in names if n.startswith("enqueued rid=")),
           "enqueued_max_dur_ns": max((r[1] - r[0] for r in f.ranges if r[4].startswith("enqueued rid=")),
                                      default=None),
           "profile_all_threads": bool(kw), "expected_per_thread": k}
    ok = got["batches_main"] == k and got["parse"] >= k and got["encode"] >= k and got["requests"] >= k and \
        got["enqueued"] >= k
    got["ok"] = ok
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline", help="another checkout's root (today's clef_prof), timed in the same runs")
    ap.add_argument("--out", default=".", help="folder for the emission check's trace")
    args = ap.parse_args()
    root = os.getcwd()
    try:
        import torch
        have_torch = True
        print(f"torch {torch.__version__}")
    except ImportError:
        have_torch = False
        print("torch not installed: only the no-torch row")
    modes = ["none"] + (["torch-imported", "profiler"] if have_torch else [])
    rows = {}
    print(f"ns per range (thread CPU, best of {args.repeat} x {args.n}): with stage / with batch(n=8) / "
          "with request(rid) / enqueued(rid)")
    for mode in modes:
        for label, r in (("this checkout", root), ("baseline", args.baseline)):
            if r is None:
                continue
            res = timed(r, mode, args.n if mode != "profiler" else max(1, args.n // 10), args.repeat)
            rows[f"{mode} {label}"] = res
            if res:
                print(f"  {mode:15s} {label:14s} " + " ".join(f"{v:8.1f}" for v in res))
    if have_torch:
        os.makedirs(args.out, exist_ok=True)
        for all_threads in (False, True):
            got = check_emission(args.out, all_threads)
            print(f"emission under torch.profiler (profile_all_threads={all_threads}):", json.dumps(got))
            rows[f"emission all_threads={all_threads}"] = got
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_annotate_torch.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
