"""A small closed-loop HTTP load generator (asyncio, standard library only).

`concurrency` clients each send one request, wait for its answer, and send the next, over a
kept-alive HTTP/1.1 connection. Requests are Clef-style pooling calls by default::

    POST /v1/systemone  {"state": "<W words>", "questions": {"q0": {"type", "instructions", "criteria"}, ...}}

Every finished request is kept as (wall-clock send and end in ns, latency in ns, ok, error
text), and the send time of each request cancelled at stop, so that the requests inside a
profiling window can be counted after the fact.

    clef-prof load --url http://127.0.0.1:8000 --duration 10 --concurrency 16

The load runs on its own thread with its own event loop (`Load.start()` / `Load.stop()`), so a
synchronous driver (`clef-prof record`) can open and close a window while it runs.
"""
from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass

from ..errors import ClefError

VOCAB = ("patient", "reports", "mild", "pain", "after", "surgery", "the", "review", "notes", "stable", "vitals",
         "history", "of", "asthma", "no", "fever", "dose", "was", "adjusted", "follow", "up", "in", "two", "weeks",
         "imaging", "shows", "small", "effusion", "and", "clear", "lungs", "family", "requested", "callback",
         "medication", "list", "updated", "allergies", "none", "known", "blood", "pressure", "within", "range")
QUESTION_TYPES = ("boolean", "score", "category")


@dataclass
class LoadSettings:
    url: str = "http://127.0.0.1:8000"
    path: str = "/v1/systemone"
    concurrency: int = 16
    words: int = 200
    questions: int = 1
    timeout_s: float = 30.0
    seed: int = 0
    body_file: str | None = None           # a fixed JSON body for every request instead of generated ones

    def describe(self) -> dict:
        return asdict(self)


def make_bodies(words: int, questions: int, n: int = 64, seed: int = 0) -> list[bytes]:
    """`n` distinct request bodies of `words` words and `questions` questions each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        state = " ".join(rng.choice(VOCAB) for _ in range(max(0, words)))
        qs = {f"q{j}": {"type": QUESTION_TYPES[(i + j) % len(QUESTION_TYPES)],
                        "instructions": f"Answer question {j} about the note in one word.",
                        "criteria": "Use only what the note states; say unknown otherwise."}
              for j in range(max(0, questions))}
        out.append(json.dumps({"state": state, "questions": qs}, separators=(",", ":")).encode())
    return out


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Linear-interpolation percentile (NumPy's default) of an ascending list."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


class _HTTPError(Exception):
    pass


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("the server closed the connection")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise _HTTPError(f"bad status line {line[:80]!r}")
    status = int(parts[1])
    keep = parts[0] != "HTTP/1.0"
    length, chunked = None, False
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "connection":
            keep = value != "close" if "close" in value or "keep-alive" in value else keep
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += await reader.readexactly(size)
            await reader.readline()
        return status, bytes(body), keep
    if length is not None:
        return status, await reader.readexactly(length), keep
    if status in (204, 304) or 100 <= status < 200:
        return status, b"", keep
    return status, await reader.read(), False


@dataclass
class Completion:
    done_ns: int          # wall clock (time.time_ns) when the answer was complete
    latency_ns: int
    ok: bool
    error: str | None = None
    sent_ns: int = 0      # wall clock when the request was sent


class Load:
    """Closed-loop load on a background thread. start(), then stop(); records in .done."""

    def __init__(self, settings: LoadSettings):
        self.s = settings
        u = urllib.parse.urlsplit(settings.url)
        if u.scheme not in ("http", "") or not u.hostname:
            raise ClefError(f"load: only plain http:// URLs are supported, not {settings.url!r}")
        self.host, self.port = u.hostname, u.port or 80
        self.base_path = u.path.rstrip("/")
        if settings.body_file:
            try:
                with open(settings.body_file, "rb") as fh:
                    body = fh.read()
                json.loads(body)
            except (OSError, ValueError) as exc:
                raise ClefError(f"--request-body {settings.body_file}: not a readable JSON file ({exc})") from None
            self.bodies = [body]
        else:
            self.bodies = make_bodies(settings.words, settings.questions, seed=settings.seed)
        self.done: list[Completion] = []
        self.cancelled = 0
        self.unfinished: list[int] = []          # send times (wall ns) of the requests cancelled at stop
        self._sending: dict[int, int] = {}       # client -> send time of its request in flight
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._grace = 5.0
        self._fatal: BaseException | None = None

    # -- control (any thread) -------------------------------------------------------------
    def start(self) -> "Load":
        self._thread = threading.Thread(target=self._run, name="clef-prof-load", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        """Let in-flight requests finish (up to grace_s), then cancel what is left."""
        if self._thread is None:
            return
        self._grace = grace_s
        if self._loop is not None and self._stop is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        self._thread.join(grace_s + 5)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- counts ---------------------------------------------------------------------------
    def ok_count(self) -> int:
        return sum(1 for c in list(self.done) if c.ok)

    def error_count(self) -> int:
        return sum(1 for c in list(self.done) if not c.ok)

    def first_error(self) -> str | None:
        for c in list(self.done):
            if not c.ok:
                return c.error
        return None

    def summary(self, t0_ns: int | None = None, t1_ns: int | None = None) -> dict:
        """Completions with t0 < end <= t1 (all when None): counts, errors, latency percentiles."""
        sel = [c for c in list(self.done) if (t0_ns is None or c.done_ns > t0_ns) and (t1_ns is None or c.done_ns <= t1_ns)]
        ok = sorted(c.latency_ns / 1e6 for c in sel if c.ok)
        errors: dict[str, int] = {}
        for c in sel:
            if not c.ok:
                key = (c.error or "error")[:160]
                errors[key] = errors.get(key, 0) + 1
        span = None if t0_ns is None or t1_ns is None else (t1_ns - t0_ns) / 1e9
        return {"completions": len(ok), "errors": len(sel) - len(ok), "error_kinds": errors,
                "latency_ms_p50": percentile(ok, 50), "latency_ms_p99": percentile(ok, 99),
                "latency_ms_mean": (sum(ok) / len(ok)) if ok else None,
                "throughput_rps": (len(ok) / span) if span else None}

    def bounds(self, t0_ns: int, t1_ns: int) -> tuple[int, int]:
        """(inside, overlapping): requests answered OK that were sent and answered within [t0, t1],
        and requests of any outcome (cancelled ones too) whose send-to-answer span meets [t0, t1].
        A server that handles every request between its send and its answer served at least
        `inside` and at most `overlapping` requests in [t0, t1]."""
        done = list(self.done)
        inside = sum(1 for c in done if c.ok and c.sent_ns >= t0_ns and c.done_ns <= t1_ns)
        over = sum(1 for c in done if c.done_ns >= t0_ns and c.sent_ns <= t1_ns)
        return inside, over + sum(1 for t in self.unfinished if t <= t1_ns)

    # -- the loop thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported through .fatal
            self._fatal = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        tasks = [asyncio.create_task(self._client(i)) for i in range(max(1, self.s.concurrency))]
        await self._stop.wait()
        done, pending = await asyncio.wait(tasks, timeout=self._grace)
        for t in pending:
            t.cancel()
        self.cancelled = len(pending)
        self.unfinished = sorted(self._sending.values())
        await asyncio.gather(*pending, return_exceptions=True)

    async def _client(self, i: int) -> None:
        path = (self.base_path + self.s.path) or "/"
        host_hdr = f"{self.host}:{self.port}"
        reader = writer = None
        k = i
        try:
            while not self._stop.is_set():
                body = self.bodies[k % len(self.bodies)]
                k += self.s.concurrency
                head = (f"POST {path} HTTP/1.1\r\nHost: {host_hdr}\r\nContent-Type: application/json\r\n"
                        f"Accept: application/json\r\nContent-Length: {len(body)}\r\nConnection: keep-alive\r\n"
                        f"User-Agent: clef-prof-load\r\n\r\n").encode("latin-1")
                sent = self._sending[i] = time.time_ns()
                t0 = time.perf_counter_ns()
                err = None
                status = 0
                try:
                    if writer is None:
                        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                                self.s.timeout_s)
                    writer.write(head + body)
                    await writer.drain()
                    status, data, keep = await asyncio.wait_for(_read_response(reader), self.s.timeout_s)
                    if not 200 <= status < 300:
                        err = f"HTTP {status}: {data[:120].decode('utf-8', 'replace').strip()}"
                    if not keep:
                        writer.close()
                        reader = writer = None
                except asyncio.TimeoutError:
                    err = f"timeout after {self.s.timeout_s:g} s"
                except (OSError, ConnectionError, asyncio.IncompleteReadError, _HTTPError, ValueError) as exc:
                    err = f"{type(exc).__name__}: {exc}"
                if err is not None and writer is not None and (status == 0 or status >= 500):
                    writer.close()
                    reader = writer = None
                t1 = time.perf_counter_ns()
                self.done.append(Completion(time.time_ns(), t1 - t0, err is None, err, sent))
                del self._sending[i]
                if err is not None and status == 0:
                    await asyncio.sleep(0.05)   # refused or reset: do not spin
        finally:
            if writer is not None:
                writer.close()


# --------------------------------------------------------------------------------------------
# command line
