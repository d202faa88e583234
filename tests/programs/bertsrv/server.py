"""An embedding service around a real transformers `BertModel` (random weights, fp16 on CUDA),
served with aiohttp, with no NVTX in its code: clef-prof's injection and attribution are
checked on it (`tests/programs/bertsrv.toml`).

    python -m bertsrv.server --port 8000 [--device cuda|cpu] [--max-batch 16] [--attn eager|sdpa]

A batcher thread runs `Embedder.run(texts)` once per batch: the tokenizer's `__call__`,
`BatchEncoding.to(device)`, `BertModel.forward`, and one `.cpu()` of the pooled rows. The
event-loop (main) thread turns each embedding into the response with `respond()`; before the
batcher starts, the main thread runs one warm-up batch itself. `POST /start_profile` and
`POST /stop_profile` call cudaProfilerStart/Stop from the batcher thread between two batches;
the stop answer holds the requests and batches the batcher finished in between. With
`CLEF_PROF_TORCH_PROFILER_DIR` set (as vLLM's `torch_profiler_dir`, SGLang's
`SGLANG_TORCH_PROFILER_DIR`), they run a PyTorch profiler over every thread instead and write its
Kineto trace there at stop (with Python stacks when `CLEF_PROF_TORCH_WITH_STACK=1`). `--attn`
picks transformers' attention implementation (`eager` or `sdpa`): the two arms of a real
function-level change inside `BertModel.forward`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import string
import tempfile
import threading

import torch
from aiohttp import web
from transformers import BertConfig, BertModel, BertTokenizerFast

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def vocab_file(folder: str) -> str:
    """A WordPiece vocabulary of characters: every lower-case word tokenizes, letter by letter."""
    chars = string.ascii_lowercase + string.digits + ".,;:!?'-"
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(SPECIAL + list(chars) + ["##" + c for c in chars]) + "\n")
    return path


class Embedder:
    """Tokenize, copy to the device, run the encoder, pool the [CLS] row."""

    def __init__(self, device: str, max_len: int = 256, attn: str | None = None):
        self.device = device
        self.max_len = max_len
        self._dir = tempfile.mkdtemp(prefix="bertsrv-")
        self.tokenizer = BertTokenizerFast(vocab_file=vocab_file(self._dir))
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=self.tokenizer.vocab_size, hidden_size=256, num_hidden_layers=4,
                         num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512,
                         **({"attn_implementation": attn} if attn else {}))
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        self.model = BertModel(cfg).to(device=device, dtype=dtype).eval()

    def run(self, texts: list[str]) -> list[list[float]]:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
        enc = enc.to(self.device)
        with torch.inference_mode():
            out = self.model(**enc)
        return out.last_hidden_state[:, 0].float().cpu().tolist()


def respond(vector: list[float], index: int) -> bytes:
    """One OpenAI-style embeddings response."""
    return json.dumps({"object": "list", "data": [{"object": "embedding", "index": index, "embedding": vector}],
                       "model": "bert-random"}).encode()


def text_of(body: dict) -> str:
    """The text of an `/v1/embeddings` body (`input`) or of clef-prof's generated bodies (`state`)."""
    text = body.get("input", body.get("state", ""))
    return " ".join(text) if isinstance(text, list) else str(text)


def answer(fut: asyncio.Future, value) -> None:
    if not fut.done():              # the client may have gone
        fut.set_result(value)


class Batcher(threading.Thread):
    """Takes whatever is queued (1 to max_batch texts), embeds it, answers each future."""

    def __init__(self, embedder: Embedder, loop: asyncio.AbstractEventLoop, max_batch: int):
        super().__init__(name="batcher", daemon=True)
        self.embedder, self.loop, self.max_batch = embedder, loop, max_batch
        self.inbox: queue.Queue = queue.Queue()
        self.window: dict | None = None

    def run(self) -> None:
        while True:
            items = [self.inbox.get()]
            while len(items) < self.max_batch:
                try:
                    items.append(self.inbox.get_nowait())
                except queue.Empty:
                    break
            control = [i for i in items if i[0] != "text"]
            texts = [i for i in items if i[0] == "text"]
            if texts:
                vectors = self.embedder.run([t[1] for t in texts])
                if self.window is not None:
                    self.window["batches"] += 1
                    self.window["requests"] += len(texts)
                for (_, _, fut), vec in zip(texts, vectors):
                    self.loop.call_soon_threadsafe(answer, fut, vec)
            for kind, _, fut in control:
                self.loop.call_soon_threadsafe(answer, fut, self.profile(kind))

    def profile(self, kind: str) -> dict:
        on_gpu = self.embedder.device.startswith("cuda")
        trace_dir = os.environ.get("CLEF_PROF_TORCH_PROFILER_DIR")
        if on_gpu:
            torch.cuda.synchronize()
        if kind == "start":
            if trace_dir:
                acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
                self.prof = torch.profiler.profile(activities=acts, with_stack=os.environ.get("CLEF_PROF_TORCH_WITH_STACK") == "1",
                                                   experimental_config=torch.profiler._ExperimentalConfig(profile_all_threads=True))
                self.prof.start()
            elif on_gpu:
                torch.cuda.profiler.start()
            self.window = {"requests": 0, "batches": 0}
            return {"status": "profiling"}
        w, self.window = self.window, None
        if trace_dir and getattr(self, "prof", None) is not None:
            self.prof.stop()
            os.makedirs(trace_dir, exist_ok=True)
            self.prof.export_chrome_trace(os.path.join(trace_dir, f"bertsrv-{os.getpid()}.pt.trace.json.gz"))
            self.prof = None
        elif on_gpu:
            torch.cuda.profiler.stop()
        return {"status": "stopped", **(w or {"requests": 0, "batches": 0})}


def make_app(batcher: Batcher) -> web.Application:
    async def submit(kind, payload=None):
        fut = asyncio.get_running_loop().create_future()
        batcher.inbox.put((kind, payload, fut))
        return await fut

    async def embed(request: web.Request) -> web.Response:
        vector = await submit("text", text_of(await request.json()))
        return web.Response(body=respond(vector, 0), content_type="application/json")

    async def start(request: web.Request) -> web.Response:
        return web.json_response(await submit("start"))

    async def stop(request: web.Request) -> web.Response:
        return web.json_response(await submit("stop"))

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.add_routes([web.post("/v1/embeddings", embed), web.post("/v1/systemone", embed),
                    web.post("/start_profile", start), web.post("/stop_profile", stop), web.get("/health", health)])
    return app


async def serve(embedder: Embedder, port: int, max_batch: int) -> None:
    loop = asyncio.get_running_loop()
    batcher = Batcher(embedder, loop, max_batch)
    batcher.start()
    runner = web.AppRunner(make_app(batcher))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stopped = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopped.set)
    await stopped.wait()
    await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--attn", choices=["eager", "sdpa"], default=None, help="attention implementation (default: transformers')")
    args = ap.parse_args()
    embedder = Embedder(args.device, attn=args.attn)
    vectors = embedder.run(["warm up the encoder on the main thread"] * 4)
    for i, v in enumerate(vectors):
        respond(v, i)
    asyncio.run(serve(embedder, args.port, args.max_batch))


if __name__ == "__main__":
    main()
