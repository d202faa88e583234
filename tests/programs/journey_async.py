"""A coroutine server whose batches run on two executor threads at once (two batches in flight):
each request is a task under `async with clef_prof.request(rid)`; it marks `enqueued`, waits on a
future, then encodes its answer on the loop's thread. A collector task takes up to 4 queued
requests per batch and hands each batch to a pool of 2 threads, without waiting for the last one.
Usage: journey_async.py [REQUESTS]"""
import asyncio
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import clef_prof

N = int(sys.argv[1]) if len(sys.argv) > 1 else 120
POOL = ThreadPoolExecutor(2, thread_name_prefix="batcher")
ENCODE = clef_prof.stage("encode")


def run_batch(ids):
    with clef_prof.batch(request_ids=ids):
        with clef_prof.stage("parse"):
            time.sleep(0.0004)
        with clef_prof.stage("head"):
            time.sleep(0.002)
    return {i: f"answer {i}" for i in ids}


async def handle(rid, queue):
    async with clef_prof.request(rid):
        await asyncio.sleep(0.0002)             # reading the body
        fut = asyncio.get_running_loop().create_future()
        clef_prof.enqueued(rid)
        await queue.put((rid, fut))
        answer = await fut
        with ENCODE:                            # no await from here to the return
            out = answer.encode() * 20
        return out


async def collector(queue):
    loop = asyncio.get_running_loop()
    inflight = set()
    while True:
        items = [await queue.get()]
        if items[0] is None:
            break
        while len(items) < 4 and not queue.empty():
            items.append(queue.get_nowait())
        stop = any(i is None for i in items)
        items = [i for i in items if i is not None]
        futs = dict(items)
        job = loop.run_in_executor(POOL, run_batch, list(futs))
        job.add_done_callback(lambda j, futs=futs: [f.set_result(j.result()[k]) for k, f in futs.items()])
        inflight.add(job)
        job.add_done_callback(inflight.discard)
        if stop:
            break
    await asyncio.gather(*inflight)


async def main():
    queue = asyncio.Queue()
    col = asyncio.create_task(collector(queue))
    tasks = []
    for i in range(N):
        tasks.append(asyncio.create_task(handle(f"a{i}", queue)))
        if i % 8 == 7:
            await asyncio.sleep(0.003)
    await asyncio.gather(*tasks)
    await queue.put(None)
    await col


asyncio.run(main())
POOL.shutdown()
