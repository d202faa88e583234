"""Batch ranges inside batch ranges, for clef-prof's nested-batch tests.

    python nested_batches.py --rounds N --out facts.json   (under `clef-prof inject --spec nested.toml`)

pooler_app.annotated.Pooler.run opens its own batch range (`with clef_prof.batch(n=...)`); the
spec nested.toml makes `Pooler.run` the batch target as well, so each call holds an injected
range around the annotated one (an annotation plus an injected spec on the same function).
Each round runs:
  - direct: `Pooler.run(batch)`;
  - serve: `serve(batch)`, a batch target of its own (`with clef_prof.batch`) calling Pooler.run
    (one batch target calling another);
  - async: `handle(batch)`, an `async with clef_prof.batch` (a start/end range) around another of
    the same size, and, beside it on the same event loop, two tasks with batches of different
    sizes in flight at once (start/end ranges of concurrent tasks, not nested calls).
Sizes cycle 1..4. `--out` gets what a correct count is: the outermost batches and their sizes.
"""
import argparse
import asyncio
import json
import os

import clef_prof
from pooler_app.annotated import Pooler


def make_batch(i, size):
    return [json.dumps({"id": f"r{i}-{j}", "tokens": 3 + j}) for j in range(size)]


def serve(pooler, batch):
    with clef_prof.batch(n=len(batch)):
        return pooler.run(batch)


async def handle(batch):
    async with clef_prof.batch(n=len(batch)):
        async with clef_prof.batch(n=len(batch)):
            await asyncio.sleep(0.001)


async def concurrent(a, b):
    async def one(batch, delay):
        async with clef_prof.batch(n=len(batch)):
            await asyncio.sleep(delay)
    # the first task's range opens first and closes last: the second one lies inside it, on the
    # same thread, but it is another batch
    await asyncio.gather(one(a, 0.004), one(b, 0.001))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    pooler = Pooler()
    loop = asyncio.new_event_loop()
    sizes = []
    for i in range(a.rounds):
        n = 1 + i % 4
        pooler.run(make_batch(i, n))
        serve(pooler, make_batch(i, n))
        loop.run_until_complete(handle(make_batch(i, n)))
        m = 1 + (i + 1) % 4
        loop.run_until_complete(concurrent(make_batch(i, n), make_batch(i, m)))
        sizes += [n, n, n, n, m]
    loop.close()
    pooler.close()
    with open(a.out, "w") as fh:
        json.dump({"pid": os.getpid(), "sizes": sizes, "rounds": a.rounds,
                   "wrapped": hasattr(Pooler.run, "__clef_prof__")}, fh)


if __name__ == "__main__":
    main()
