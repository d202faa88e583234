"""A two-process server: an API process whose handler threads each run one request under
`with clef_prof.request(rid)`, mark `enqueued` and pass (rid, body) over a queue to a GPU-worker
process (spawned), which batches up to 8 ids per `clef_prof.batch(request_ids=...)` and sends the
answers back; a dispatcher thread wakes the handlers, and each encodes its answer before it returns.
Usage: journey_procs.py [REQUESTS]"""
import multiprocessing as mp
import queue
import sys
import threading
import time

import clef_prof


def worker(inq, outq):
    while True:
        items = [inq.get()]
        if items[0] is None:
            break
        while len(items) < 8:
            try:
                items.append(inq.get(timeout=0.001))
            except queue.Empty:
                break
        stop = any(i is None for i in items)
        items = [i for i in items if i is not None]
        with clef_prof.batch(request_ids=[rid for rid, _ in items]):
            with clef_prof.stage("parse"):
                time.sleep(0.0005)
            with clef_prof.stage("head"):
                time.sleep(0.002)
        for rid, body in items:
            outq.put((rid, body.upper()))
        if stop:
            break


def main(n: int) -> None:
    ctx = mp.get_context("spawn")
    inq, outq = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker, args=(inq, outq))
    proc.start()
    waiting, lock = {}, threading.Lock()

    def dispatcher():
        for _ in range(n):
            rid, answer = outq.get()
            with lock:
                ev, box = waiting.pop(rid)
            box.append(answer)
            ev.set()

    def handler(rid):
        with clef_prof.request(rid):
            body = f"body of {rid}"
            ev, box = threading.Event(), []
            with lock:
                waiting[rid] = (ev, box)
            clef_prof.enqueued(rid)
            inq.put((rid, body))
            ev.wait()
            with clef_prof.stage("encode"):
                box[0].encode() * 10

    d = threading.Thread(target=dispatcher)
    d.start()
    threads = []
    for i in range(n):
        t = threading.Thread(target=handler, args=(f"p{i}",))
        t.start()
        threads.append(t)
        if i % 6 == 5:
            time.sleep(0.004)
    for t in threads:
        t.join()
    d.join()
    inq.put(None)
    proc.join()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 90)
