"""Two data-parallel ranks of a pooling server, for the scrub's request-id test (tests/data/cpu23-dp-rids).

Each rank is a spawned process that runs its own batches of requests, in step with the other
rank (a barrier before each batch) and with the same batch sizes at the same time, so only the
request ids (`rid=embd-<32 hex>`, as vLLM names embedding requests) tell the ranks apart.
Stages parse, index, transfer, head, encode nest in each batch. Ids are random: nothing secret.

    PYTHONPATH=<clef-prof checkout> python dp_rids.py
"""
import multiprocessing as mp
import sys
import time
import uuid

SIZES = (16, 3, 9, 1, 12, 5, 16, 7, 2, 11, 4, 8)
STAGES = ("parse", "index", "transfer", "head", "encode")


def rank(barrier):
    import clef_prof

    stages = [clef_prof.stage(s) for s in STAGES]
    for n in SIZES:
        ids = [f"embd-{uuid.uuid4().hex}" for _ in range(n)]
        barrier.wait()
        with clef_prof.batch(request_ids=ids):
            for s in stages:
                with s:
                    time.sleep(0.001 + 0.0002 * n)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    ps = [ctx.Process(target=rank, args=(barrier,)) for _ in range(2)]
    [p.start() for p in ps]
    [p.join() for p in ps]
    sys.exit(max(p.exitcode for p in ps))
