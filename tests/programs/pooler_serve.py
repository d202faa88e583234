"""A toy model server for clef-prof's injection tests: a parent serving loop hands batches of
JSON requests to a pooler worker and waits for each result.

    python pooler_serve.py --mode plain|annotated --start spawn|forkserver|subprocess \
        --batches N --out facts.json

The worker runs `pooler_app.<mode>.Pooler.run` once per batch (sizes cycle 1, 2, 3, 4) and
exits normally: nsys flushes a process's NVTX buffers when it exits, and a terminated
worker (Pool.terminate, SIGKILL) loses them. `--out` gets the parent's and the worker's pid,
the batch sizes, and which pooler functions each process saw wrapped by `clef-prof inject`.
"""
import argparse
import importlib
import json
import multiprocessing as mp
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (1, 2, 3, 4)
WRAP_CHECK = {"run": ("Pooler", "run"), "parse": (None, "parse_schema"), "index": ("Pooler", "_indices"),
              "transfer": ("Pooler", "transfer"), "head": ("Pooler", "head")}


def wrapped(mode):
    """Which pooler callables carry clef-prof's wrapper mark, in this process."""
    mod = importlib.import_module(f"pooler_app.{mode}")
    from pooler_app import frontend
    out = {}
    for key, (cls, name) in WRAP_CHECK.items():
        owner = getattr(mod, cls) if cls else mod
        out[key] = getattr(owner, name, None) is not None and hasattr(getattr(owner, name), "__clef_prof__")
    out["encode"] = hasattr(frontend.encode, "__clef_prof__")
    return out


def make_batch(i, size):
    return [json.dumps({"id": f"r{i}-{j}", "tokens": 3 + j}) for j in range(size)]


def worker(mode, inbox, outbox):
    pooler = importlib.import_module(f"pooler_app.{mode}").Pooler()
    outbox.put({"pid": os.getpid(), "wrapped": wrapped(mode)})
    while True:
        batch = inbox.get()
        if batch is None:
            break
        outbox.put(pooler.run(batch))
    pooler.close()


def receive(outbox, proc, timeout=60):
    """The worker's next answer; exits at once if the worker died (no 60 s hang)."""
    import queue
    import time
    deadline = time.monotonic() + timeout
    while True:
        try:
            return outbox.get(timeout=0.2)
        except queue.Empty:
            if not proc.is_alive():
                sys.exit(f"pooler worker died (exit code {proc.exitcode})")
            if time.monotonic() > deadline:
                sys.exit("pooler worker did not answer")


def run_subprocess(mode, batches):
    code = ("import json, os, sys, pooler_serve as s\n"
            f"p = __import__('pooler_app.{mode}', fromlist=['Pooler']).Pooler()\n"
            f"for i in range({batches}): p.run(s.make_batch(i, s.SIZES[i % len(s.SIZES)]))\n"
            f"print(json.dumps({{'pid': os.getpid(), 'wrapped': s.wrapped({mode!r})}}))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["plain", "annotated"], default="plain")
    ap.add_argument("--start", choices=["spawn", "forkserver", "fork", "subprocess"], default="spawn")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--out")
    a = ap.parse_args()
    sizes = [SIZES[i % len(SIZES)] for i in range(a.batches)]
    if a.start == "subprocess":
        info = run_subprocess(a.mode, a.batches)
    else:
        ctx = mp.get_context(a.start)
        inbox, outbox = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=worker, args=(a.mode, inbox, outbox), name="pooler-worker")
        proc.start()
        info = receive(outbox, proc)
        for i, n in enumerate(sizes):
            inbox.put(make_batch(i, n))
            receive(outbox, proc)
        inbox.put(None)
        proc.join(60)
        if proc.exitcode != 0:
            sys.exit(f"worker exit code {proc.exitcode}")
    facts = {"parent_pid": os.getpid(), "worker_pid": info["pid"], "sizes": sizes,
             "worker_wrapped": info["wrapped"], "parent_wrapped": wrapped(a.mode)}
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(facts, fh)
    else:
        print(json.dumps(facts))


if __name__ == "__main__":
    main()
