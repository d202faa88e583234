"""Records tests/data/cpu23-ranks.sqlite.xz: a CPU capture (nsys 2023.4, -t nvtx,osrt) of six
worker processes in three phases, one after another, each phase two spawned workers in step
(a barrier before each batch):

- "tp-rid": tensor-parallel replicas, the same six batches (sizes 3 1 4 2 5 2, 17 requests) with the
  same request ids, batch ranges push/pop (NVTX eventType 59) from clef_prof.batch;
- "tp-sizes": replicas again, without ids (same sizes at the same time), batch ranges start/end
  (eventType 60) written with the NVTX client's Domain.start/end;
- "dp-requests": data-parallel ranks, each its own batches (3 + 2 + ... : 5 and 12 requests), sizes
  written as `requests=K` (no `n=`, no payload), distinct request ids.

Each batch holds a "parse" and a "head" stage range (push/pop). What the test expects follows from
the program alone: 18 batches and 51 requests counted (17 a phase; replicas once), 6 processes of
which the higher pid of each replica pair is not counted. The export is scrubbed before it is
committed. Run from the repository root:

    PYTHONPATH=$PWD python3 tests/programs/ranks_capture.py
"""
from __future__ import annotations

import json
import lzma
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
NAME = "cpu23-ranks"
SIZES = (3, 1, 4, 2, 5, 2)

PROGRAM = """
import sys, time, multiprocessing as mp
sys.path.insert(0, {root!r})
import clef_prof
from clef_prof.annotate import nvtx_client as nv

SIZES = {sizes!r}

def run_stages(stages, n):
    for s in stages:
        with s:
            time.sleep(0.004 + 0.001 * n)

def worker(phase, rank, barrier):
    stages = [clef_prof.stage(s) for s in ("parse", "head")]
    dom = nv.Domain("clef")
    mine = SIZES if phase != "dp-requests" else SIZES[rank::2]
    for i, n in enumerate(mine):
        barrier.wait()
        if phase == "tp-rid":
            with clef_prof.batch(n=n, request_ids=[f"q{{i}}-{{k}}" for k in range(n)]):
                run_stages(stages, n)
        elif phase == "tp-sizes":
            rid = dom.start(f"pooler n={{n}}")
            run_stages(stages, n)
            dom.end(rid)
        else:
            dom.push(f"pooler requests={{n}} rid=" + ",".join(f"w{{rank}}b{{i}}-{{k}}" for k in range(n)))
            run_stages(stages, n)
            dom.pop()

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for phase in ("tp-rid", "tp-sizes", "dp-requests"):
        barrier = ctx.Barrier(2)
        ps = [ctx.Process(target=worker, args=(phase, r, barrier)) for r in range(2)]
        [p.start() for p in ps]
        [p.join() for p in ps]
        time.sleep(0.2)
"""


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from recording import record

    with tempfile.TemporaryDirectory() as tmp:
        cap = record(PROGRAM.format(root=str(ROOT), sizes=SIZES), Path(tmp) / "rec")
        clean = Path(tmp) / f"{NAME}.sqlite"
        subprocess.run([sys.executable, "-m", "clef_prof", "scrub", str(cap), str(clean)], check=True, cwd=ROOT)
        with open(clean, "rb") as src, lzma.open(DATA / f"{NAME}.sqlite.xz", "wb", preset=9) as dst:
            shutil.copyfileobj(src, dst)
    truth = {"program": "tests/programs/ranks_capture.py", "nsys": "2023.4", "phases": {
        "tp-rid": {"processes": 2, "replicas": True, "batches": 6, "requests": sum(SIZES), "range": "push/pop (59)"},
        "tp-sizes": {"processes": 2, "replicas": True, "batches": 6, "requests": sum(SIZES),
                     "range": "start/end (60)"},
        "dp-requests": {"processes": 2, "replicas": False, "batches": 6, "requests": sum(SIZES),
                        "range": "push/pop (59), requests=K"}},
        "ground_truth": {"batches": 18, "requests": 3 * sum(SIZES), "processes": 6, "counted_processes": 4}}
    (DATA / f"{NAME}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(DATA / f"{NAME}.sqlite.xz")


if __name__ == "__main__":
    main()
