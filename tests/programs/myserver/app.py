"""The HTTP side: POST /embed {"texts": [...]}, GET /health, and a batcher thread that runs up to
16 queued requests per Embedder.run call.

    python -m myserver.app --port 8000
"""
from __future__ import annotations

import argparse
import asyncio
import json
import queue
import threading

from aiohttp import web

from .model import Embedder


def parse_request(body: bytes) -> list[str]:
    texts = json.loads(body)["texts"]
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a list of strings")
    return texts


def build_response(vectors: list[list[float]]) -> bytes:
    return json.dumps({"data": [{"embedding": [round(x, 6) for x in v]} for v in vectors]}).encode()


def batcher(jobs: queue.Queue, model: Embedder) -> None:
    while True:
        first = jobs.get()
        batch = [first]
        while len(batch) < 16:
            try:
                batch.append(jobs.get_nowait())
            except queue.Empty:
                break
        texts = [t for _, ts, _ in batch for t in ts]
        vectors = model.run(texts)
        i = 0
        for loop, ts, fut in batch:
            loop.call_soon_threadsafe(fut.set_result, vectors[i:i + len(ts)])
            i += len(ts)


def make_app() -> web.Application:
    jobs: queue.Queue = queue.Queue()
    threading.Thread(target=batcher, args=(jobs, Embedder()), daemon=True).start()

    async def embed(request: web.Request) -> web.Response:
        texts = parse_request(await request.read())
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        jobs.put((loop, texts, fut))
        return web.Response(body=build_response(await fut), content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/embed", embed)
    app.router.add_get("/health", health)
    return app


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8000)
    web.run_app(make_app(), host="127.0.0.1", port=p.parse_args().port, print=None)
