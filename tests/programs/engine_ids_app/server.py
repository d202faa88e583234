"""A server with no clef_prof in it whose ids are renamed on their way to the engine, as vLLM's
are (tests/programs/engine_ids.toml; annotations/clef-vllm.toml): the handler's id is the
X-Request-Id header, else the body's `request_id`; its API id is `embd-<id>`; prompt n joins the
engine as `embd-<id>-<n>` (`AsyncLLM.add_request`), and the engine appends `-<8 hex>`, the id in
the worker's `input_batch.req_ids`. The `score` handler is vLLM's ServingScores: a
`__call__(self, *args, **kwargs)` that forwards to the base's, whose prompts join as
`score-<id>-query-<n>` (0.22.1's late-interaction keys). Handlers are coroutines on one event loop; the engine is a thread that
runs steps of at most 4 rows, so a 2-prompt request may span two steps.
Usage: python -m engine_ids_app.server [REQUESTS]"""
import asyncio
import queue
import secrets
import sys
import threading
import time
from types import SimpleNamespace

STEP_ROWS = 4


def pool(rows):
    time.sleep(0.0004 * len(rows))
    return [len(r) for r in rows]


class Runner:
    """The worker: one step's pooling call over the rows scheduled in it."""

    def __init__(self):
        self.input_batch = SimpleNamespace(req_ids=[])

    def _pool(self, num_scheduled_tokens_np):
        return pool(num_scheduled_tokens_np)


class Engine:
    def __init__(self):
        self.q = queue.Queue()
        self.runner = Runner()

    def loop(self):
        while True:
            first = self.q.get()
            if first is None:
                return
            time.sleep(0.001)                     # the step is scheduled a little later
            rows = [first]
            while len(rows) < STEP_ROWS:
                try:
                    item = self.q.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self.q.put(None)
                    break
                rows.append(item)
            self.runner.input_batch.req_ids = [r[0] for r in rows]
            out = self.runner._pool([r[1] for r in rows])
            for (_, _, fut, loop), o in zip(rows, out):
                loop.call_soon_threadsafe(fut.set_result, o)


ENGINE = Engine()


class AsyncLLM:
    async def add_request(self, request_id, prompt, params=None):
        engine_id = f"{request_id}-{secrets.token_hex(4)}"
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        ENGINE.q.put((engine_id, prompt, fut, loop))
        return fut


LLM = AsyncLLM()


class PoolingBaseServing:
    request_id_prefix = ""

    async def __call__(self, request, raw_request=None):
        base = raw_request.headers.get("X-Request-Id") if raw_request is not None else None
        request_id = f"{self.request_id_prefix}-{base or request.request_id}"
        futs = [await LLM.add_request(self.prompt_id(request_id, i), p) for i, p in enumerate(request.input)]
        return [await f for f in futs]

    def prompt_id(self, request_id, i):
        return f"{request_id}-{i}"


class ServingEmbedding(PoolingBaseServing):
    request_id_prefix = "embd"


class ServingScores(PoolingBaseServing):
    request_id_prefix = "score"

    async def __call__(self, *args, **kwargs):
        return await super().__call__(*args, **kwargs)

    def prompt_id(self, request_id, i):
        return f"{request_id}-query-{i}"


async def main(n):
    embed, score = ServingEmbedding(), ServingScores()
    tasks = []
    for i in range(n):
        prompts = ["x" * (i % 5 + 1)] * (2 if i % 2 == 0 else 1)
        body = SimpleNamespace(request_id=secrets.token_hex(8), input=prompts)
        raw = SimpleNamespace(headers={"X-Request-Id": f"hdr-{i}"} if i % 3 == 0 else {})
        handler = score if i == n - 1 else embed
        tasks.append(asyncio.ensure_future(handler(body, raw)))
        if i % 5 == 4:
            await asyncio.sleep(0.004)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    t = threading.Thread(target=ENGINE.loop)
    t.start()
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
    ENGINE.q.put(None)
    t.join()
