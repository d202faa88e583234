"""`clef-prof demo-server`: a reference pooling server in the Clef style, annotated for clef-prof.

    clef-prof demo-server --variant main|pr [--sync none|item|device] [--port 8000] [--device auto|cpu|cuda]

Endpoints:
- `POST /v1/systemone` `{"state": text, "questions": {name: {type, instructions, criteria}}}`
  answers `{"answers": {name: {"score", "label"}}, "words": n}`;
- `GET /health` (200 once warmed up), `GET /version`;
- `GET /metrics`: the Prometheus text format, written here by hand: the gauges
  `clef_demo_num_requests_waiting` (requests queued for the batcher) and
  `clef_demo_num_requests_running` (requests in the batch being run), and the counters
  `clef_demo_requests_total` and `clef_demo_batches_total` (what `bench` scrapes);
- `POST /start_profile` / `POST /stop_profile`: cudaProfilerStart / cudaProfilerStop on a GPU,
  200 on the CPU too (so that an nsys-session window can be used), and an NVTX start/end range
  `window` in the domain `clef-prof` in between (for `--capture-range=nvtx`). /stop_profile
  answers the server's own count of the requests and batches it ran inside the window.
  With $CLEF_PROF_TORCH_PROFILER_DIR set (`clef-prof record --profiler torch` sets it) they
  start and stop a PyTorch profiler instead (CPU and CUDA activities), which writes
  `demo-server-PID-N.pt.trace.json.gz` into that folder at each stop. It is started on the
  batching thread, with `_ExperimentalConfig(profile_all_threads=True)` where torch has it (every
  thread's batch and stage ranges); CLEF_PROF_TORCH_ALL_THREADS=0 leaves it
  out (then only the batching thread's ranges are recorded: docs/kineto.md).

Each /v1/systemone request runs in `clef_prof.request(rid)` on its HTTP thread (rid: its
X-Request-Id header, else r1, r2, ...), with the mark `clef_prof.enqueued(rid)` where it joins
the queue: what `clef-prof analyze` turns into per-request journeys (docs/journey.md).
A batcher on the main thread takes whatever is queued (1 to 16 requests) and runs one pooler
per batch inside `clef_prof.batch(n=K, request_ids=...)`, with the stages `parse`, `index`, `transfer`, `head`
and `encode` (clef_prof.stage) nested in that order. It also runs /start_profile and
/stop_profile, between two batches: cudaProfilerStart and cudaProfilerStop come from the thread
that does the CUDA work (with cudaProfilerStart and Stop called from two different HTTP threads,
nsys 2023.4 opened the capture range but never closed it).

On a GPU (torch with CUDA) it mirrors the workload of the captures in tests/data: per request
9 metadata tensors, 3424 bytes in all; **main** builds each from a Python list and copies it
to the GPU from pageable memory, blocking (9 H2D copies and 9 syncs per request); **pr** packs
the same data with NumPy into 3 pinned buffers copied with `non_blocking=True` (3 H2D copies).
`head` launches 15 kernels and one CUDA graph (3 kernels) per request, and makes one DtoH
`.cpu()` copy per batch. `--sync item` adds one `.item()` per request in `transfer` (a DtoH copy
and a cudaStreamSynchronize), `--sync device` one `torch.cuda.synchronize()` per request there
(cudaDeviceSynchronize): what the findings' sync rule looks for. Without a GPU the same stages
do the same bookkeeping in pure Python, and `--sync` does nothing.

Only the standard library is imported, plus torch and NumPy in the GPU path.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time
import zlib
from array import array
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..annotate.api import batch as nvtx_batch
from ..annotate.api import enqueued, request, stage
from ..base.errors import ClefError
from .presets import TORCH_DIR_ENV, TORCH_STACK_ENV

MAX_BATCH = 16
# the 9 metadata tensors of a request: int64 element counts (428 elements = 3424 bytes)
META_SIZES = (64, 64, 64, 48, 48, 48, 32, 32, 28)
# pr packs them into 3 buffers of 3 tensors each
PACKS = ((0, 1, 2), (3, 4, 5), (6, 7, 8))
HEAD_KERNELS = 15         # kernel launches per request in head, plus one graph launch
GRAPH_KERNELS = 3
SYNC_MODES = ("none", "item", "device")   # --sync: a synchronizing call per request in transfer
WINDOW_DOMAIN = "clef-prof"
WINDOW_RANGE = "window"   # record --window nvtx: --nvtx-capture=window@clef-prof

S_PARSE, S_INDEX, S_TRANSFER, S_HEAD, S_ENCODE = (stage(n) for n in ("parse", "index", "transfer", "head", "encode"))


class BadRequest(Exception):
    pass


def _h(text: str, mod: int) -> int:
    return zlib.crc32(text.encode()) % mod


def _fit(values: list[int], n: int) -> list[int]:
    """`values` cut or padded (repeating, else zeros) to exactly n items."""
    if len(values) >= n:
        return values[:n]
    if not values:
        return [0] * n
    return (values * (n // len(values) + 1))[:n]


def parse_request(body: bytes) -> dict:
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(req, dict) or not isinstance(req.get("state"), str):
        raise BadRequest('expected {"state": text, "questions": {...}}')
    qs = req.get("questions")
    if not isinstance(qs, dict) or not qs:
        raise BadRequest('"questions" must be a non-empty object {name: {type, instructions, criteria}}')
    out = {}
    for name, q in qs.items():
        if not isinstance(q, dict):
            raise BadRequest(f"question {name!r} must be an object")
        out[name] = (str(q.get("type", "boolean")), str(q.get("instructions", "")), str(q.get("criteria", "")))
    return {"state": req["state"], "questions": out}


def index_request(req: dict) -> list[list[int]]:
    """The 9 metadata lists of one request (token ids, positions, mask, question features, ...)."""
    words = req["state"].split()
    n_tok = min(len(words), META_SIZES[0])
    tok = _fit([_h(w, 30000) for w in words[:META_SIZES[0]]], META_SIZES[0])
    pos = list(range(META_SIZES[1]))
    mask = [1] * n_tok + [0] * (META_SIZES[2] - n_tok)
    names = list(req["questions"])
    qid = _fit([_h(n, 1000) for n in names], META_SIZES[3])
    qtype = _fit([_h(t, 8) for t, _, _ in req["questions"].values()], META_SIZES[4])
    qlen = _fit([len(i) + len(c) for _, i, c in req["questions"].values()], META_SIZES[5])
    starts, acc = [], 0
    for w in words[:META_SIZES[6]]:
        starts.append(acc)
        acc += len(w) + 1
    offsets = _fit(starts, META_SIZES[6])
    lengths = _fit([len(w) for w in words[:META_SIZES[7]]], META_SIZES[7])
    segments = _fit([i % len(names) for i in range(len(words[:META_SIZES[8]]))], META_SIZES[8])
    return [tok, pos, mask, qid, qtype, qlen, offsets, lengths, segments]


def encode_response(req: dict, score: float, n_words: int) -> bytes:
    answers = {}
    for k, (name, (qtype, _, _)) in enumerate(req["questions"].items()):
        s = (score * (k + 1)) % 1.0
        answers[name] = {"score": round(s, 6),
                         "label": ("yes" if s >= 0.5 else "no") if qtype == "boolean" else f"c{int(s * 4)}"}
    return json.dumps({"answers": answers, "words": n_words}, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------
# poolers

class CpuPooler:
    """The stages in pure Python: 9 (main) or 3 (pr) buffer copies per request, a 15-step head."""

    device = "cpu"

    def __init__(self, variant: str, sync: str = "none"):
        self.variant, self.sync = variant, sync        # no GPU to wait for: --sync does nothing here

    def transfer(self, metas: list[list[list[int]]]) -> list:
        out = []
        if self.variant == "main":
            for meta in metas:
                out.append([bytes(array("q", m).tobytes()) for m in meta])       # 9 copies
        else:
            for meta in metas:
                packed = []
                for group in PACKS:                                               # 3 copies
                    a = array("q")
                    for i in group:
                        a.extend(meta[i])
                    packed.append(bytes(a.tobytes()))
                out.append(packed)
        return out

    def head(self, dev: list) -> list[float]:
        scores = []
        for bufs in dev:
            tok = array("q")
            tok.frombytes(bufs[0][:8 * META_SIZES[0]])
            x = [float(v) for v in tok[:16]]
            for j in range(HEAD_KERNELS):
                x = [v * 0.5 for v in x] if j % 2 == 0 else [v + 1.0 for v in x]
            for _ in range(GRAPH_KERNELS):
                x = [v * v % 97.0 for v in x]
            scores.append((sum(x) % 1000.0) / 1000.0)
        return scores

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass


class GpuPooler:
    """torch on CUDA: the reference workload's copies, kernels, graph launches and DtoH."""

    device = "cuda"

    def __init__(self, variant: str, sync: str = "none"):
        import numpy as np
        import torch
        self.np, self.torch, self.variant, self.sync = np, torch, variant, sync
        self.dev = torch.device("cuda")
        torch.cuda.init()
        width = META_SIZES[0]
        self.work = torch.zeros(MAX_BATCH, width, device=self.dev)
        self.g_in = torch.zeros(width, device=self.dev)
        self.g_mid = torch.zeros(width, device=self.dev)
        self.out = torch.zeros(MAX_BATCH, width, device=self.dev)
        self.pack_sizes = [sum(META_SIZES[i] for i in g) for g in PACKS]
        self.graphs = self._capture_graphs()

    def _graph_body(self, slot: int) -> None:
        t = self.torch
        t.mul(self.g_in, 2.0, out=self.g_mid)
        self.g_mid.add_(1.0)
        t.mul(self.g_mid, self.g_mid, out=self.out[slot])

    def _capture_graphs(self) -> list:
        t = self.torch
        s = t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            for _ in range(3):
                self._graph_body(0)
        t.cuda.current_stream().wait_stream(s)
        graphs = []
        for slot in range(MAX_BATCH):
            g = t.cuda.CUDAGraph()
            with t.cuda.graph(g):
                self._graph_body(slot)
            graphs.append(g)
        t.cuda.synchronize()
        return graphs

    def transfer(self, metas: list[list[list[int]]]) -> list:
        t, np = self.torch, self.np
        out = []
        if self.variant == "main":
            for meta in metas:
                # 9 tensors from Python lists, pageable, blocking: 9 H2D copies (+ 9 syncs)
                out.append([t.tensor(m, dtype=t.int64).to(self.dev) for m in meta])
        else:
            for meta in metas:
                dev = []
                for group, size in zip(PACKS, self.pack_sizes):
                    a = np.concatenate([np.asarray(meta[i], dtype=np.int64) for i in group])
                    pinned = t.from_numpy(a).pin_memory()
                    dev.append(pinned.to(self.dev, non_blocking=True))          # 3 H2D copies
                out.append(dev)
        for bufs in out:
            if self.sync == "item":
                bufs[-1][-1].item()                        # 1 DtoH copy + cudaStreamSynchronize per request
            elif self.sync == "device":
                t.cuda.synchronize()                       # 1 cudaDeviceSynchronize per request
        return out

    def head(self, dev: list) -> list[float]:
        t = self.torch
        for slot, bufs in enumerate(dev):
            tok = bufs[0][:META_SIZES[0]]
            x = self.work[slot]
            x.copy_(tok)                                   # 1 kernel (int64 -> float32)
            for j in range(HEAD_KERNELS - 2):              # 13 kernels
                if j % 2 == 0:
                    x.mul_(0.5)
                else:
                    x.add_(1.0)
            t.mul(x, 0.25, out=self.g_in)                  # 1 kernel: 15 launches in all
            self.graphs[slot].replay()                     # 1 graph launch (3 kernels)
        res = self.out[:len(dev)].cpu()                    # 1 DtoH copy per batch, and its sync
        return [(float(v) % 1000.0) / 1000.0 for v in res[:, 0].tolist()]

    def profiler_start(self) -> None:
        self.torch.cuda.cudart().cudaProfilerStart()

    def profiler_stop(self) -> None:
        self.torch.cuda.cudart().cudaProfilerStop()


class TorchTrace:
    """A PyTorch profiler over one window, its Kineto trace written into `folder` at stop."""

    def __init__(self, folder: str, all_threads: bool = True, with_stack: bool = False):
        self.folder = folder
        self.all_threads = all_threads
        self.with_stack = with_stack
        self.prof = None
        self.n = 0

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        kw = {}
        cfg = getattr(torch.profiler, "_ExperimentalConfig", None)
        if cfg is not None and self.all_threads:
            try:        # every thread's record_function ranges, not only the starting thread's
                kw["experimental_config"] = cfg(profile_all_threads=True)
            except TypeError:
                pass
        self.prof = profile(activities=acts, with_stack=self.with_stack, **kw)
        self.prof.start()

    def stop(self) -> str:
        prof, self.prof = self.prof, None
        prof.stop()
        self.n += 1
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"demo-server-{os.getpid()}-{self.n}.pt.trace.json.gz")
        prof.export_chrome_trace(path)
        return path


def make_pooler(variant: str, device: str = "auto", sync: str = "none"):
    if sync not in SYNC_MODES:
        raise ClefError(f"demo-server: --sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
    if device == "cpu":
        return CpuPooler(variant, sync)
    try:
        import torch
        ok = torch.cuda.is_available()
    except ImportError:
        torch, ok = None, False
    if not ok:
        if device == "cuda":
            raise ClefError("demo-server: --device cuda, but " + ("torch is not installed" if torch is None else
                                                                   "torch sees no CUDA device"))
        return CpuPooler(variant, sync)
    return GpuPooler(variant, sync)


# --------------------------------------------------------------------------------------------
# the server

class _Server(ThreadingHTTPServer):
    request_queue_size = 256      # listen backlog: many clients connecting at once must not wait for SYN retries
    daemon_threads = True


class Control:
    """/start_profile or /stop_profile, run by the batcher between two batches: the thread that
    does the CUDA work also starts and stops the profiler (as a single-threaded server would)."""

    __slots__ = ("kind", "done", "result", "error")

    def __init__(self, kind: str):
        self.kind = kind
        self.done = threading.Event()
        self.result = None
        self.error = None


class Pending:
    __slots__ = ("body", "rid", "done", "status", "answer")

    def __init__(self, body: bytes, rid: str = ""):
        self.body = body
        self.rid = rid
        self.done = threading.Event()
        self.status = 500
        self.answer = b""


class DemoServer:
    def __init__(self, variant: str = "pr", host: str = "127.0.0.1", port: int = 8000, device: str = "auto",
                 max_batch: int = MAX_BATCH, profile_endpoints: bool = True, die_in_window_s: float | None = None,
                 never_healthy: bool = False, quiet: bool = False, delay_ms: float = 0.0, score_offset: float = 0.0,
                 die_after_requests: int | None = None, sync: str = "none"):
        if variant not in ("main", "pr"):
            raise ClefError(f"demo-server: --variant must be main or pr, not {variant!r}")
        self.variant, self.host, self.port = variant, host, port
        self.max_batch = max(1, min(int(max_batch), MAX_BATCH))
        self.profile_endpoints = profile_endpoints
        self.die_in_window_s = die_in_window_s
        self.never_healthy = never_healthy
        self.quiet = quiet
        self.delay_s = max(0.0, delay_ms) / 1000.0
        self.score_offset = score_offset
        self.die_after_requests = die_after_requests
        self.q: queue.Queue[Pending] = queue.Queue()
        self.ready = False
        self.stopping = threading.Event()
        self.pooler = make_pooler(variant, device, sync)
        self.lock = threading.Lock()
        self.window: dict | None = None       # open profiling window: start time, counts
        self.totals = {"requests": 0, "batches": 0}
        self.running = 0                      # requests in the batch being run
        self.torch_trace = (TorchTrace(os.environ[TORCH_DIR_ENV], os.environ.get("CLEF_PROF_TORCH_ALL_THREADS", "1") != "0",
                                       os.environ.get(TORCH_STACK_ENV) == "1")
                            if os.environ.get(TORCH_DIR_ENV) else None)
        from ..annotate import nvtx_client as nc
        self._wdom = nc.Domain(WINDOW_DOMAIN)
        self._wmsg = self._wdom.register(WINDOW_RANGE)
        self._wid = 0
        self._rid = 0
        try:
            self.httpd = _Server((host, port), self._handler_class())
        except OSError as exc:
            raise ClefError(f"demo-server: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    # -- pooler ---------------------------------------------------------------------------
    def run_batch(self, items: list[Pending]) -> None:
        t0 = time.monotonic()
        self.running = len(items)
        with nvtx_batch(n=len(items), request_ids=[p.rid for p in items] if items[0].rid else None):
            with S_PARSE:
                reqs = []
                for p in items:
                    try:
                        reqs.append(parse_request(p.body))
                    except BadRequest as exc:
                        p.status, p.answer = 400, json.dumps({"error": str(exc)}).encode()
                        reqs.append(None)
            good = [(p, r) for p, r in zip(items, reqs) if r is not None]
            with S_INDEX:
                metas = [index_request(r) for _, r in good]
            with S_TRANSFER:
                dev = self.pooler.transfer(metas) if metas else []
            with S_HEAD:
                scores = self.pooler.head(dev) if dev else []
                if self.delay_s and good:
                    time.sleep(self.delay_s * len(good))
            with S_ENCODE:
                for (p, r), s in zip(good, scores):
                    p.status, p.answer = 200, encode_response(r, s + self.score_offset, len(r["state"].split()))
        t1 = time.monotonic()
        self.running = 0
        with self.lock:
            self.totals["requests"] += len(items)
            self.totals["batches"] += 1
            if self.die_after_requests is not None and self.ready and self.totals["requests"] >= self.die_after_requests:
                os.kill(os.getpid(), signal.SIGKILL)
            w = self.window
            if w is not None and t0 >= w["t0"]:
                w["batches"].append((t1, len(items)))
        for p in items:
            p.done.set()

    def warm_up(self) -> None:
        from .load import make_bodies
        bodies = make_bodies(200, 1, n=MAX_BATCH, seed=1)
        for n in (1, 4, MAX_BATCH, 2):
            self.run_batch([Pending(b) for b in bodies[:n]])
        with self.lock:
            self.totals = {"requests": 0, "batches": 0}

    def batcher(self) -> None:
        while not self.stopping.is_set():
            try:
                first = self.q.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(first, Control):
                self._control(first)
                continue
            items, ctl = [first], None
            while len(items) < self.max_batch:
                try:
                    nxt = self.q.get_nowait()
                except queue.Empty:
                    break
                if isinstance(nxt, Control):
                    ctl = nxt
                    break
                items.append(nxt)
            self.run_batch(items)
            if ctl is not None:
                self._control(ctl)
        while True:   # answer whatever is left
            try:
                p = self.q.get_nowait()
            except queue.Empty:
                break
            if isinstance(p, Control):
                p.error = "shutting down"
            else:
                p.status, p.answer = 503, b'{"error": "shutting down"}'
            p.done.set()

    def _control(self, c: Control) -> None:
        try:
            c.result = self.start_profile() if c.kind == "start" else self.stop_profile()
        except Exception as exc:  # reported to the caller, the server keeps serving
            c.error = f"{type(exc).__name__}: {exc}"
        c.done.set()

    def control(self, kind: str, timeout: float = 600.0) -> tuple[int, dict]:
        """From an HTTP thread: have the batcher run start/stop_profile; (status, answer)."""
        if self.stopping.is_set():
            return 503, {"error": "shutting down"}
        c = Control(kind)
        self.q.put(c)
        if not c.done.wait(timeout):
            return 504, {"error": f"{kind}_profile did not finish in {timeout:g} s"}
        return (500, {"error": c.error}) if c.error else (200, c.result)

    # -- profiling window -----------------------------------------------------------------
    def start_profile(self) -> dict:
        with self.lock:
            if self.window is not None:
                return {"status": "already profiling"}
            if self.torch_trace is not None:
                self.torch_trace.start()
            else:
                self.pooler.profiler_start()
            self._wid = self._wdom.start(self._wmsg)
            self.window = {"t0": time.monotonic(), "batches": []}
        if self.die_in_window_s is not None:
            threading.Timer(self.die_in_window_s, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        return {"status": "profiling", "device": self.pooler.device}

    def stop_profile(self) -> dict:
        with self.lock:
            w, self.window = self.window, None
            t1 = time.monotonic()
            if w is None:
                return {"status": "not profiling"}
            if self._wid:
                self._wdom.end(self._wid)
                self._wid = 0
        trace = self.torch_trace.stop() if self.torch_trace is not None else None
        if trace is None:
            self.pooler.profiler_stop()
        done = [(t, n) for t, n in w["batches"] if t <= t1]
        return {"status": "stopped", "device": self.pooler.device, "window_s": t1 - w["t0"],
                "requests": sum(n for _, n in done), "batches": len(done), **({"trace": trace} if trace else {})}

    # -- HTTP -----------------------------------------------------------------------------
    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "clef-prof-demo"
            # headers and body go out in two writes: without TCP_NODELAY the body waits for the
            # client's delayed ACK (40 ms a request)
            disable_nagle_algorithm = True

            def log_message(self, *args):   # no line per request
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, obj) -> None:
                self._send(status, json.dumps(obj).encode())

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n > 0 else b""

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path == "/health":
                    if server.ready and not server.never_healthy:
                        self._json(200, {"status": "ok"})
                    else:
                        self._json(503, {"status": "starting"})
                elif path == "/version":
                    self._json(200, server.version_info())
                elif path == "/metrics":
                    self._send(200, server.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._json(404, {"error": f"no route GET {path}"})

            def do_POST(self):
                path = self.path.split("?", 1)[0]
                if path == "/v1/systemone":
                    rid = self.headers.get("X-Request-Id") or server.next_rid()
                    with request(rid):
                        return self._systemone(rid)
                self._body()        # read, so that the connection can carry the next request
                if path in ("/start_profile", "/stop_profile") and server.profile_endpoints:
                    self._json(*server.control("start" if path == "/start_profile" else "stop"))
                else:
                    self._json(404, {"error": f"no route POST {path}"})

            def _systemone(self, rid: str):
                """One request: its range `request rid=ID` covers the body read to the answer written;
                the mark `enqueued rid=ID` is where it joins the batcher's queue."""
                body = self._body()
                if server.stopping.is_set():
                    return self._json(503, {"error": "shutting down"})
                p = Pending(body, rid)
                enqueued(rid)
                server.q.put(p)
                if not p.done.wait(60):
                    return self._json(504, {"error": "the pooler did not answer in 60 s"})
                self._send(p.status, p.answer)

        return Handler

    def metrics_text(self) -> bytes:
        """GET /metrics: the Prometheus text exposition format (version 0.0.4)."""
        with self.lock:
            totals = dict(self.totals)
        rows = (("num_requests_waiting", "gauge", "Requests queued for the batcher.", self.q.qsize()),
                ("num_requests_running", "gauge", "Requests in the batch being run.", self.running),
                ("requests_total", "counter", "Requests run since warm-up.", totals["requests"]),
                ("batches_total", "counter", "Batches run since warm-up.", totals["batches"]))
        return "".join(f"# HELP clef_demo_{n} {h}\n# TYPE clef_demo_{n} {t}\nclef_demo_{n} {v}\n"
                       for n, t, h, v in rows).encode()

    def next_rid(self) -> str:
        """A request id for a request that brings no X-Request-Id: r1, r2, ..."""
        with self.lock:
            self._rid += 1
            return f"r{self._rid}"

    def version_info(self) -> dict:
        from ..base.defaults import VERSION as __version__
        info = {"server": "clef-prof demo-server", "version": __version__, "variant": self.variant,
                "sync": self.pooler.sync, "device": self.pooler.device, "python": sys.version.split()[0], "max_batch": self.max_batch}
        if self.pooler.device == "cuda":
            t = self.pooler.torch
            info.update(torch=t.__version__, cuda=t.version.cuda, gpu=t.cuda.get_device_name(0))
        return info

    def serve(self) -> int:
        """Warm up, serve until SIGINT/SIGTERM, shut down cleanly."""
        def on_signal(signum, frame):
            self.stopping.set()
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        http = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                name="demo-http", daemon=True)
        http.start()
        try:
            self.warm_up()
            self.ready = True
            if not self.quiet:
                print(f"demo-server: variant {self.variant}, sync {self.pooler.sync}, on {self.pooler.device}, "
                      f"listening on http://{self.host}:{self.port}", file=sys.stderr, flush=True)
            self.batcher()
        finally:
            self.stopping.set()
            self.httpd.shutdown()
            self.httpd.server_close()
            for s, h in old.items():
                signal.signal(s, h)
        if not self.quiet:
            print(f"demo-server: stopped after {self.totals['requests']} requests in {self.totals['batches']} batches",
                  file=sys.stderr, flush=True)
        return 0


# --------------------------------------------------------------------------------------------
# command line
