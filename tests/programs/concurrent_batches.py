"""A pooler with two executor threads that run batches at the same time (two batches in
flight; on a GPU each thread has its own CUDA stream), for clef-prof's concurrent-batch tests.

    python concurrent_batches.py --device cpu|cuda --rounds N --out facts.json

Each round, the two threads meet at a barrier and each runs one batch, annotated with
clef_prof.batch (`pooler n=K`) and the stages parse, transfer, head and encode: the two batch
spans of a round overlap. Batch sizes cycle 1..4 (thread t, round i: 1 + (i + t) % 4).
With --device cuda: one pinned H2D copy in transfer, HEAD_MATMULS matmuls in head and one
D2H copy in encode per batch, on the thread's own stream, synchronized before the batch ends
(all of a batch's GPU work lies inside its span). With --device cpu: the same stages with
sleeps (which release the GIL) instead. `--out` gets, per thread, its native id and sizes.
"""
import argparse
import json
import os
import threading
import time

import clef_prof

THREADS = 2
HEAD_MATMULS = 4
DIM = 1024


def sizes_of(thread: int, rounds: int) -> list[int]:
    return [1 + (i + thread) % 4 for i in range(rounds)]


def run_thread(t: int, rounds: int, barrier: threading.Barrier, device: str, facts: dict) -> None:
    try:
        batches(t, rounds, barrier, device, facts)
    except BaseException as exc:
        barrier.abort()             # the other thread stops waiting, and main exits non-zero
        facts["error"] = f"thread {t}: {exc!r}"


def batches(t: int, rounds: int, barrier: threading.Barrier, device: str, facts: dict) -> None:
    facts[t] = {"native_id": threading.get_native_id(), "sizes": sizes_of(t, rounds)}
    gpu = None
    if device == "cuda":
        import torch
        stream = torch.cuda.Stream()
        weight = (torch.randn(DIM, DIM, device="cuda") / DIM ** 0.5).to(torch.float16)
        host = [torch.randn(64 * n, DIM).to(torch.float16).pin_memory() for n in (1, 2, 3, 4)]
        torch.cuda.synchronize()
        gpu = (torch, stream, weight, host)
    for n in facts[t]["sizes"]:
        barrier.wait()
        with clef_prof.batch(n=n):
            with clef_prof.stage("parse"):
                reqs = [json.loads(json.dumps({"id": f"t{t}-{j}", "tokens": 3 + j})) for j in range(n)]
            if gpu is None:
                with clef_prof.stage("transfer"):
                    time.sleep(0.002)
                with clef_prof.stage("head"):
                    time.sleep(0.003)
                with clef_prof.stage("encode"):
                    ",".join(r["id"] for r in reqs)
            else:
                torch, stream, weight, host = gpu
                with torch.cuda.stream(stream):
                    with clef_prof.stage("transfer"):
                        x = host[n - 1].to("cuda", non_blocking=True)
                    with clef_prof.stage("head"):
                        for _ in range(HEAD_MATMULS):
                            x = x @ weight
                    with clef_prof.stage("encode"):
                        out = x[:, :8].to("cpu", non_blocking=True)
                        stream.synchronize()
                        ",".join(str(v) for v in out[0].tolist())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    barrier = threading.Barrier(THREADS, timeout=120)
    facts: dict = {}
    threads = [threading.Thread(target=run_thread, args=(t, a.rounds, barrier, a.device, facts)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if "error" in facts:
        raise SystemExit(facts["error"])
    info = {"pid": os.getpid(), "device": a.device, "threads": [facts[t] for t in range(THREADS)]}
    if a.device == "cuda":
        import torch
        info["torch"] = torch.__version__
        info["gpu"] = torch.cuda.get_device_name(0)
    with open(a.out, "w") as fh:
        json.dump(info, fh)


if __name__ == "__main__":
    main()
