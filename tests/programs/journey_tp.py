"""A tensor-parallel server: an API process whose handler threads each run one request under
`with clef_prof.request(rid)`, mark `enqueued` and hand it to a scheduler thread, which takes up
to 8 waiting requests per step and sends the step to 2 rank processes (spawned) over their own
queues. Both ranks run the same batch, `clef_prof.batch(request_ids=...)` with the same ids and
the stages parse and head, their times differing by rank and step (now one rank ends later, now
the other); the scheduler waits for both ranks' answers (gathered over one queue) before it wakes
the step's handlers and takes the next step, as a tensor-parallel engine does. Each handler
encodes its answer (`encode`, outside every batch) before it returns. Requests start once both
ranks are up.

Usage: journey_tp.py [REQUESTS] [TRUTH.json]: with a path, the program writes its own count there
(requests, ranks, each step's ids in order, which rank ended each step last by its own clock)."""
import json
import multiprocessing as mp
import queue
import sys
import threading
import time

import clef_prof

RANKS = 2
MAX_BATCH = 8


def rank(r, inq, outq):
    stages = [clef_prof.stage("parse"), clef_prof.stage("head")]
    outq.put(("ready", r))
    while True:
        step = inq.get()
        if step is None:
            break
        k, items = step
        with clef_prof.batch(request_ids=[rid for rid, _ in items]):
            with stages[0]:
                time.sleep(0.0003 + 0.0001 * len(items))
            with stages[1]:
                # the slower rank alternates: rank 0 on steps k % 3 == 0, rank 1 otherwise
                slow = (k % 3 == 0) == (r == 0)
                time.sleep(0.001 + (0.0008 if slow else 0.0))
        outq.put((r, k, [(rid, body.upper()) for rid, body in items], time.perf_counter()))


def main(n: int, truth_path: str | None) -> None:
    ctx = mp.get_context("spawn")
    inqs = [ctx.Queue() for _ in range(RANKS)]
    outq = ctx.Queue()
    procs = [ctx.Process(target=rank, args=(r, inqs[r], outq)) for r in range(RANKS)]
    for p in procs:
        p.start()
    for _ in range(RANKS):              # both ranks up before the first request
        assert outq.get()[0] == "ready"
    pending: queue.Queue = queue.Queue()
    waiting, lock = {}, threading.Lock()
    steps, last_rank = [], []

    def scheduler():
        done = 0
        while done < n:
            items = [pending.get()]
            while len(items) < MAX_BATCH:
                try:
                    items.append(pending.get_nowait())
                except queue.Empty:
                    break
            k = len(steps)
            steps.append([rid for rid, _ in items])
            for q in inqs:
                q.put((k, items))
            answers = [outq.get() for _ in range(RANKS)]
            assert {a[1] for a in answers} == {k}
            last_rank.append(max(answers, key=lambda a: a[3])[0])
            for rid, answer in answers[0][2]:
                with lock:
                    ev, box = waiting.pop(rid)
                box.append(answer)
                ev.set()
            done += len(items)

    def handler(rid):
        with clef_prof.request(rid):
            body = f"body of {rid}"
            ev, box = threading.Event(), []
            with lock:
                waiting[rid] = (ev, box)
            clef_prof.enqueued(rid)
            pending.put((rid, body))
            ev.wait()
            with clef_prof.stage("encode"):
                box[0].encode() * 10

    s = threading.Thread(target=scheduler)
    s.start()
    threads = []
    for i in range(n):
        t = threading.Thread(target=handler, args=(f"t{i}",))
        t.start()
        threads.append(t)
        if i % 6 == 5:
            time.sleep(0.003)
        if len(threads) >= 64:          # bound the live handler threads
            threads.pop(0).join()
    for t in threads:
        t.join()
    s.join()
    for q in inqs:
        q.put(None)
    for p in procs:
        p.join()
    if truth_path:
        with open(truth_path, "w") as f:
            json.dump({"requests": n, "ranks": RANKS, "steps": steps, "last_rank": last_rank}, f)
    sys.exit(max(p.exitcode for p in procs))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300, sys.argv[2] if len(sys.argv) > 2 else None)
