"""Records tests/data/cpu23-fork-orphans.sqlite.xz: a CPU capture (nsys 2023.4, -t nvtx,osrt,
--trace-fork-before-exec=true, as record runs nsys) of a server that forks two workers after it
created its NVTX domain, with an NVTX client that does not create its domains again in a forked
child (clef-prof's own client does: annotate.nvtx_client; here its after-fork step is turned off
around the fork, as any other client would behave). nsys starts each child's domains afresh, so
the workers' ranges carry a domain id their process never created.

The parent runs 5 batches of one request, forks the workers, each runs 8 batches with request
ids of its own (data-parallel workers), then the parent runs 5 more: 26 batches in the capture,
of which only the parent's 10 are in a domain known to their process. Each batch holds a "parse"
stage. The export is scrubbed before it is committed. Run from the repository root:

    PYTHONPATH=$PWD python3 tests/programs/fork_orphans.py
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
NAME = "cpu23-fork-orphans"
PARENT, WORKER, WORKERS = 5, 8, 2

PROGRAM = """
import os, sys, time
sys.path.insert(0, {root!r})
import clef_prof
from clef_prof.annotate import nvtx_client

def work(n, tag):
    for i in range(n):
        with clef_prof.batch(n=1, request_ids=[f"{{tag}}-{{i}}"]), clef_prof.stage("parse"):
            time.sleep(0.005)

work({parent}, "p0")
nvtx_client._ON = False             # the after-fork step off: a client that keeps the parent's handles
children = []
for w in range({workers}):
    pid = os.fork()
    if pid == 0:
        nvtx_client._ON = True
        time.sleep(0.05)
        work({worker}, f"w{{w}}")
        time.sleep(0.05)
        sys.exit(0)                  # a normal exit: nsys flushes the child's last buffer
    children.append(pid)
nvtx_client._ON = True
for pid in children:
    os.waitpid(pid, 0)
work({parent}, "p1")
"""


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from recording import record

    program = PROGRAM.format(root=str(ROOT), parent=PARENT, worker=WORKER, workers=WORKERS)
    with tempfile.TemporaryDirectory() as tmp:
        cap = record(program, Path(tmp) / "rec", nsys_args=("--trace-fork-before-exec=true",))
        clean = Path(tmp) / f"{NAME}.sqlite"
        subprocess.run([sys.executable, "-m", "clef_prof", "scrub", str(cap), str(clean)], check=True, cwd=ROOT)
        with open(clean, "rb") as src, lzma.open(DATA / f"{NAME}.sqlite.xz", "wb", preset=9) as dst:
            shutil.copyfileobj(src, dst)
    truth = {"program": "tests/programs/fork_orphans.py", "nsys": "2023.4",
             "ground_truth": {"processes": 1 + WORKERS, "parent_batches": 2 * PARENT, "worker_batches": WORKER,
                              "batches": 2 * PARENT + WORKERS * WORKER, "counted_batches": 2 * PARENT}}
    (DATA / f"{NAME}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(DATA / f"{NAME}.sqlite.xz")


if __name__ == "__main__":
    main()
