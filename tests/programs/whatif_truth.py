"""A ground-truth server for `clef-prof whatif`: a real HTTP server (the demo server's stack and
request format) whose batch loop's critical path is known by construction.

    python whatif_truth.py --port P [--prep-ms 1.5] [--device-ms 2.5] [--side-ms 0.8] [--max-batch 4]
                           [--wait] [--die-when-delayed TEXT]

A batcher on the main thread takes up to --max-batch queued requests (1 to max-batch) and per
batch of n:
- `prep` (clef_prof.stage): spins prep-ms × n on the batch loop: on the critical path;
- hands the batch to a helper thread, whose stage `side` spins side-ms × n, and meanwhile waits
  device-ms × n (a sleep: the simulated device, the GIL released);
- then waits for `side` to finish (the answers need it) and answers the batch.

So the batch cycle is prep + max(device, side) per request: `side` is hidden while it is shorter
than the device wait (its slope 0) and becomes critical once a slowdown makes it longer (the
response bends where side × (1 + f) = device). With more clients in flight than --max-batch the
batch loop is never idle: throughput = 1 / (cycle per request), so a stage on the critical path
costs exactly its added time: throughput(x) = 1 / (1 / R0 + x) for +x ms per request.
--wait: prep and side sleep instead of spinning (a server whose stages wait: its cycle hardly
depends on how busy the machine's CPUs are, so the figures vary little between servers).
--die-when-delayed TEXT: SIGKILL itself after 150 requests when $CLEF_PROF_DELAY contains TEXT (a
server that dies at one delay level).
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

from clef_prof import stage
from clef_prof.record.demo_server import BadRequest, _Server, encode_response, parse_request

PREP, SIDE = stage("prep"), stage("side")


def spin(s: float) -> None:
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass


class Pending:
    __slots__ = ("body", "done", "status", "answer")

    def __init__(self, body: bytes):
        self.body, self.done, self.status, self.answer = body, threading.Event(), 500, b""


def answer(items: list, reqs: list) -> None:
    """Write the batch's answers: a plain function, the target of tests/programs/whatif_truth.toml
    (`clef-prof whatif --spec`: a stage injected, not annotated)."""
    for p, r in zip(items, reqs):
        if r is not None:
            p.status, p.answer = 200, encode_response(r, 0.5, len(r["state"].split()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prep-ms", type=float, default=1.5)
    ap.add_argument("--device-ms", type=float, default=2.5)
    ap.add_argument("--side-ms", type=float, default=0.8)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--wait", action="store_true")
    ap.add_argument("--die-when-delayed", metavar="TEXT")
    a = ap.parse_args()
    work = time.sleep if a.wait else spin
    die_after = 150 if a.die_when_delayed and a.die_when_delayed in os.environ.get("CLEF_PROF_DELAY", "") else None
    served = 0
    q: queue.Queue = queue.Queue()
    side_q: queue.Queue = queue.Queue()
    stopping = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send(200, b'{"status": "ok"}') if self.path == "/health" else self._send(404, b"{}")

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            p = Pending(body)
            q.put(p)
            p.done.wait(60)
            self._send(p.status, p.answer)

    def side_worker():
        while True:
            n, done = side_q.get()
            with SIDE:
                work(a.side_ms * n / 1000)
            done.set()

    httpd = _Server(("127.0.0.1", a.port), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    threading.Thread(target=side_worker, daemon=True).start()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while not stopping.is_set():
        try:
            items = [q.get(timeout=0.1)]
        except queue.Empty:
            continue
        while len(items) < a.max_batch:
            try:
                items.append(q.get_nowait())
            except queue.Empty:
                break
        n = len(items)
        with PREP:
            work(a.prep_ms * n / 1000)
            reqs = []
            for p in items:
                try:
                    reqs.append(parse_request(p.body))
                except BadRequest as exc:
                    reqs.append(None)
                    p.status, p.answer = 400, json.dumps({"error": str(exc)}).encode()
        done = threading.Event()
        side_q.put((n, done))
        time.sleep(a.device_ms * n / 1000)      # the simulated device
        done.wait()
        answer(items, reqs)
        for p in items:
            p.done.set()
        served += n
        if die_after is not None and served >= die_after:
            os.kill(os.getpid(), signal.SIGKILL)
    httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
