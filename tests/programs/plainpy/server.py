"""Ordinary Python that inject must leave working, run as `python plainpy/server.py` or
`python -m plainpy.server` (from tests/programs):

    ... --batches N --out facts.json [--interrupt]

Every target of plainpy.toml is a shape that broke inject once: an `lru_cache` function
(`tokenize`: the program reads its `cache_info()`), a staticmethod, a classmethod and a
`cached_property` (on `Pooler`), a callable instance (`handle`, whose class first stands as a
`None` placeholder), a class that redefines the name it first imported (`Encoder`, which calls
the imported one through super()), a coroutine function (`respond`), and `report`, defined
inside `if __name__ == "__main__":`. A top-level loop ($PLAINPY_LOOP iterations) runs between
the definitions and the main guard. Each function counts its own calls in CALLS; the facts
(counts, cache_info, which targets carry clef-prof's mark) go to --out. --interrupt ends the
program by an uncaught KeyboardInterrupt (SIGINT) after writing the facts; an exit handler writes
`atexit` into OUT.atexit, and OUT.open is left open with `unflushed` in its buffer, for the
interpreter's finalization to flush.
"""
import argparse
import asyncio
import atexit
import functools
import json
import os
import signal
import sys

from plainpy.base import Encoder          # first bound by an import; redefined below
from plainpy.base import CALLS as BASE_CALLS

Handler = None                            # a placeholder; the class comes below

CALLS = {"run": 0, "scale": 0, "make": 0, "table": 0, "handle": 0, "encode": 0, "respond": 0, "report": 0}


@functools.lru_cache(maxsize=None)
def tokenize(text):
    return tuple(text.split())


class Encoder(Encoder):                   # noqa: F811 - the redefinition is the point
    def encode(self, batch):
        CALLS["encode"] += 1
        return super().encode(batch)


class Pooler:
    def __init__(self, rows):
        self.rows = rows

    @staticmethod
    def scale(x):
        CALLS["scale"] += 1
        return 2 * x

    @classmethod
    def make(cls, rows):
        CALLS["make"] += 1
        return cls(rows)

    @functools.cached_property
    def table(self):
        CALLS["table"] += 1
        return {i: self.scale(i) for i in range(self.rows)}

    def run(self, batch):
        CALLS["run"] += 1
        words = [tokenize(t) for t in batch]
        sizes = Encoder().encode(batch)
        return [self.table[len(w) % self.rows] + s for w, s in zip(words, sizes)]


class Handler:                            # noqa: F811 - replaces the placeholder
    def __init__(self):
        self.seen = 0

    def __call__(self, answer):
        CALLS["handle"] += 1
        self.seen += 1
        return answer


handle = Handler()


async def respond(values):
    CALLS["respond"] += 1
    await asyncio.sleep(0)
    return json.dumps(values)


TEXTS = ("a b", "c d e", "a b", "f")
LOOP = int(os.environ.get("PLAINPY_LOOP", "0"))
total = 0
for i in range(LOOP):                     # a hot loop at the top level
    total += i


def marked():
    """Which targets carry clef-prof's wrapper mark."""
    funcs = {"tokenize": tokenize, "scale": Pooler.__dict__["scale"].__func__, "make": Pooler.__dict__["make"].__func__,
             "table": Pooler.__dict__["table"].func, "run": Pooler.run, "handle": handle, "encode": Encoder.encode,
             "respond": respond, "report": globals().get("report"),
             "base_encode": Encoder.__mro__[1].encode}
    return {k: hasattr(f, "__clef_prof__") for k, f in funcs.items()}


def main(report):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interrupt", action="store_true")
    a = ap.parse_args()
    atexit.register(lambda: open(a.out + ".atexit", "w").write("atexit"))
    pooler = Pooler.make(4)
    sizes = []
    for b in range(a.batches):
        batch = [TEXTS[(b + j) % len(TEXTS)] for j in range(1 + b % 3)]
        sizes.append(len(batch))
        out = pooler.run(batch)
        asyncio.run(respond([handle(v) for v in out]))
    info = tokenize.cache_info()
    facts = {"calls": CALLS, "base_calls": BASE_CALLS, "sizes": sizes, "loop_total": total,
             "cache_info": {"hits": info.hits, "misses": info.misses}, "handle_seen": handle.seen,
             "handle_is_handler": isinstance(handle, Handler), "scale_via_instance": pooler.scale(3),
             "make_type": type(Pooler.make(1)).__name__, "tokenize_name": tokenize.__name__,
             "respond_is_coroutine": asyncio.iscoroutinefunction(respond), "marked": marked()}
    report(facts, a.out)
    if a.interrupt:
        global left_open
        left_open = open(a.out + ".open", "w")
        left_open.write("unflushed")
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()


if __name__ == "__main__":
    def report(facts, out):
        CALLS["report"] += 1
        facts["calls"] = dict(CALLS)
        facts["marked"]["report"] = hasattr(report, "__clef_prof__")
        with open(out, "w") as fh:
            json.dump(facts, fh)

    main(report)
    sys.exit(0)
