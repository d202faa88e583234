"""A toy embedding service for clef-prof's main-module injection tests, run as
`python -m embedsrv.server` or `python embedsrv/server.py` (from tests/programs):

    ... --start spawn|forkserver --batches N --out facts.json

The main process runs one warm-up batch itself, then hands batches of JSON requests to a
worker started with `--start` and formats each answer with `respond()`. The batch
(`Embedder.run`) and the head (`Embedder.head`) are defined here, in the main module, which
the worker re-runs as `__mp_main__`; the other stages are third-party and standard-library
code: `json.JSONDecoder.decode` (parse, per request, in the worker), `rich.markup.escape`
(index, per batch), `json.JSONEncoder.encode` (inside `respond()`, per request, in the main
process). Facts (pids, batch sizes, which targets each process saw wrapped) go to --out.
"""
import argparse
import json
import multiprocessing as mp
import os

from rich.markup import escape

SIZES = (1, 2, 3)


class Embedder:
    def run(self, texts):
        escape(" ".join(texts))
        parsed = [json.loads(t) for t in texts]
        return self.head(parsed)

    def head(self, parsed):
        return [[float(len(p["text"])), float(p["id"])] for p in parsed]


def respond(vector):
    return json.dumps({"embedding": vector})


def wrapped():
    """Which targets carry clef-prof's wrapper mark in this process."""
    from json import decoder, encoder

    import rich.markup
    funcs = {"run": Embedder.run, "head": Embedder.head, "respond": respond, "decode": decoder.JSONDecoder.decode,
             "encode": encoder.JSONEncoder.encode, "escape": rich.markup.escape}
    return {k: hasattr(f, "__clef_prof__") for k, f in funcs.items()}


def make_batch(i, size):
    return [json.dumps({"id": i * 10 + j, "text": "x" * (j + 1)}) for j in range(size)]


def worker(inbox, outbox):
    embedder = Embedder()
    outbox.put({"pid": os.getpid(), "name": __name__, "wrapped": wrapped()})
    while (batch := inbox.get()) is not None:
        outbox.put(embedder.run(batch))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", choices=["spawn", "forkserver"], default="spawn")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--out")
    a = ap.parse_args()
    warm = Embedder().run(make_batch(99, 1))           # warm-up batch in the main process
    sizes = [SIZES[i % len(SIZES)] for i in range(a.batches)]
    ctx = mp.get_context(a.start)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker, args=(inbox, outbox), name="embed-worker")
    proc.start()
    info = outbox.get(timeout=120)
    answers = 0
    for i, n in enumerate(sizes):
        inbox.put(make_batch(i, n))
        answers += len([respond(v) for v in outbox.get(timeout=60)])
    inbox.put(None)
    proc.join(60)
    facts = {"parent_pid": os.getpid(), "worker_pid": info["pid"], "worker_name": info["name"], "sizes": sizes,
             "answers": answers, "warm": len(warm), "worker_exit": proc.exitcode,
             "worker_wrapped": info["wrapped"], "parent_wrapped": wrapped()}
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(facts, fh)             # iterencode: no JSONEncoder.encode range


if __name__ == "__main__":
    main()
