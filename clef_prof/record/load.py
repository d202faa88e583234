"""A small closed-loop HTTP load generator (aiohttp).

`concurrency` clients each send one request, wait for its answer, and send the next, over one
aiohttp session with a kept-alive connection per client. Requests are Clef-style pooling calls by default::

    POST /v1/systemone  {"state": "<W words>", "questions": {"q0": {"type", "instructions", "criteria"}, ...}}

Every finished request is kept as (wall-clock send and end in ns, latency in ns, ok, error
text), and the send time of each request cancelled at stop, so that the requests inside a
profiling window can be counted after the fact.

    clef-prof load --url http://127.0.0.1:8000 --duration 10 --concurrency 16

The load runs on its own thread with its own event loop (`Load.start()` / `Load.stop()`), so a
synchronous driver (`clef-prof record`) can open and close a window while it runs. aiohttp is
imported on that thread (it takes 0.15-0.2 s), so importing this module stays cheap for the
commands that never send a request. `clef-prof bench` sends through the same session and
`post` (one vocabulary of error kinds).
"""
from __future__ import annotations

import asyncio
import errno
import json
import random
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass

from ..base.errors import ClefError

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
    id_field: str | None = None            # a body field that carries each request's id too (SGLang's "rid")

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


def id_stamp(body: bytes, field: str) -> tuple[bytes, bytes]:
    """(head, tail) of a JSON object body such that head + JSON string + tail is the body with
    `field` set to that string (first, replacing one the body has): each request's id goes into
    its body with no JSON parse per request. A body that is not a JSON object is one line."""
    try:
        obj = json.loads(body)
    except ValueError as exc:
        raise ClefError(f"--request-id-field {field}: the request body is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ClefError(f"--request-id-field {field}: the request body is not a JSON object")
    obj.pop(field, None)
    rest = json.dumps(obj, separators=(",", ":")).encode()
    head = b"{" + json.dumps(field).encode() + b":"
    return head, (b"," + rest[1:]) if len(obj) else b"}"


BIN_S = 0.1            # the shortest bin a span's noise is measured over (summary)
MAX_BINS = 10
LAG_TICK_S = 0.005     # the loop-lag probe's sleep: how late it wakes is how long a ready callback waits


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


_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
MAX_ANSWER = 64 << 20       # bytes of one answer kept whole: a server that never ends its body must not fill the memory
KEEP_TEXT = 4096            # bytes of an answer the load keeps: enough for an error's text


def client_session(limit: int):
    """An aiohttp session holding at most `limit` kept-alive connections: one per client, each with
    one request in flight, so no request waits for a connection."""
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit),
                                 headers={"User-Agent": "clef-prof-load"})


def _first_line(message: str) -> str:
    """The first line of a parser's message (the next ones draw a caret under the bytes)."""
    return (message.strip().splitlines() or ["?"])[0].rstrip(":")[:80]


async def post(session, url: str, body: bytes, timeout_s: float,
               keep: int | None = None, request_id: str | None = None) -> tuple[int, bytes, str | None]:
    """POST one JSON body: (HTTP status, answer, None), or (0, b"", error kind) when no answer came
    or none that HTTP can read.

    Redirects are not followed: the latency is that of one answer from the server named. The
    whole answer is read either way (its latency runs to its last byte); `keep` None keeps it
    whole, and one over MAX_ANSWER bytes is not read further (its connection is closed): an
    error; `keep=N` keeps its first N bytes and drops the rest as it arrives, whatever its size.
    `request_id` goes out as the `X-Request-Id` header."""
    import aiohttp
    from aiohttp.http_exceptions import ContentEncodingError

    try:
        headers = _HEADERS if request_id is None else {**_HEADERS, "X-Request-Id": request_id}
        async with session.post(url, data=body, headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            data = bytearray()
            async for chunk in r.content.iter_chunked(1 << 20):
                if keep is not None:
                    data += chunk[:max(0, keep - len(data))]
                    continue
                data += chunk
                if len(data) > MAX_ANSWER:
                    r.close()
                    return 0, b"", f"answer over {MAX_ANSWER >> 20} MiB"
            return r.status, bytes(data), None
    except TimeoutError:
        return 0, b"", f"timeout after {timeout_s:g} s"
    except aiohttp.ClientConnectorError as exc:
        if isinstance(exc.os_error, ConnectionRefusedError):
            return 0, b"", "connection refused"
        return 0, b"", f"cannot connect ({exc.os_error.strerror or exc})"[:160]
    except aiohttp.ServerDisconnectedError:
        return 0, b"", "server disconnected"
    except aiohttp.ClientPayloadError as exc:
        if isinstance(exc.__cause__, ContentEncodingError):     # whole, but not in its Content-Encoding
            return 0, b"", f"malformed answer ({_first_line(exc.__cause__.message)})"
        return 0, b"", "answer cut short"      # the answer began, and its body broke off (a server that died)
    except aiohttp.ClientResponseError as exc:  # aiohttp could not parse the answer; the 400 is aiohttp's own
        return 0, b"", f"malformed answer ({_first_line(exc.message)})"
    except (aiohttp.ClientError, OSError) as exc:
        if _reset(exc) or _reset(exc.__cause__):    # aiohttp wraps a failed send: "Can not write request body"
            return 0, b"", "connection reset"
        return 0, b"", f"connection error ({type(exc).__name__}: {exc})"[:160]


def _reset(exc: BaseException | None) -> bool:
    """The peer closed the connection (reset, or a broken pipe while the request was sent)."""
    return isinstance(exc, (ConnectionResetError, BrokenPipeError)) or \
        getattr(exc, "errno", None) in (errno.ECONNRESET, errno.EPIPE)


@dataclass
class Completion:
    done_ns: int          # wall clock (time.time_ns) when the answer was complete
    latency_ns: int
    ok: bool
    error: str | None = None
    sent_ns: int = 0      # wall clock when the request was sent


def check_url(url: str, option: str = "load") -> urllib.parse.SplitResult:
    """`url` split, or one ClefError line naming `option`: an http:// or https:// URL with a host
    and a port in range (checked before any server starts, so that no command fails late)."""
    try:
        u = urllib.parse.urlsplit(url)
        ok = u.scheme in ("http", "https", "") and bool(u.hostname) and (u.port or 0) >= 0
        if ok:
            u.hostname.encode("idna")   # a label empty or over 63 characters: the name lookup raises
    except ValueError:  # that (UnicodeError), a port that is not a number or out of range, a bad [IPv6] host
        ok = False
    if not ok:
        raise ClefError(f"{option}: expected an http:// or https:// URL with a host, not {url!r}")
    return u


class Load:
    """Closed-loop load on a background thread. start(), then stop(); records in .done."""

    def __init__(self, settings: LoadSettings):
        self.s = settings
        # each request's X-Request-Id: this load's tag and the request's number, so that a server
        # (vLLM, SGLang, the demo server) names its request ranges and batch ids after it
        self.id_tag = f"{random.getrandbits(24):06x}"
        u = check_url(settings.url)
        self.url = urllib.parse.urlunsplit((u.scheme or "http", u.netloc, (u.path.rstrip("/") + settings.path) or "/",
                                            "", ""))
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
        self.stamp = [id_stamp(b, settings.id_field) for b in self.bodies] if settings.id_field else None
        self.done: list[Completion] = []
        self.cancelled = 0
        self.unfinished: list[int] = []          # send times (wall ns) of the requests cancelled at stop
        self._sending: dict[int, int] = {}       # client -> send time of its request in flight
        self.lags: list[tuple[int, int]] = []    # (wall ns, ns the loop-lag probe woke late)
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
        out = {"completions": len(ok), "errors": len(sel) - len(ok), "error_kinds": errors,
               "latency_ms_p50": percentile(ok, 50), "latency_ms_p99": percentile(ok, 99),
               "latency_ms_mean": (sum(ok) / len(ok)) if ok else None,
               "throughput_rps": (len(ok) / span) if span else None}
        if span:
            # the span in equal bins of at least BIN_S (2 to MAX_BINS): each bin's req/s and mean
            # latency, the repeated measurements that give a span's figure its noise
            k = max(2, min(MAX_BINS, int(span / BIN_S)))
            width = (t1_ns - t0_ns) / k
            n, lat = [0] * k, [0.0] * k
            for c in sel:
                if c.ok:
                    i = min(k - 1, int((c.done_ns - t0_ns - 1) // width))
                    n[i] += 1
                    lat[i] += c.latency_ns / 1e6
            out["bins_throughput_rps"] = [x / (width / 1e9) for x in n]
            out["bins_latency_ms_mean"] = [lat[i] / n[i] if n[i] else None for i in range(k)]
        lags = [lag / 1e6 for t, lag in list(self.lags) if (t0_ns is None or t > t0_ns) and (t1_ns is None or t <= t1_ns)]
        if lags:
            # how long a ready callback waited in the client's own loop: each request passes
            # through it twice (its send and its answer), which its latency holds (the client check)
            out["loop_lag_ms_mean"] = sum(lags) / len(lags)
            out["loop_lag_ms_p99"] = percentile(sorted(lags), 99)
        return out

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
        n = max(1, self.s.concurrency)
        async with client_session(n) as session:
            tasks = [asyncio.create_task(self._client(session, i)) for i in range(n)]
            probe = asyncio.create_task(self._probe_lag())
            self._ready.set()       # start() returns with every client about to send
            await self._stop.wait()
            probe.cancel()
            _, pending = await asyncio.wait(tasks, timeout=self._grace)
            for t in pending:
                t.cancel()
            self.unfinished = sorted(self._sending.values())
            self.cancelled = len(self.unfinished)     # not a client pausing after an error it has counted
            await asyncio.gather(*pending, return_exceptions=True)

    async def _probe_lag(self) -> None:
        """Sleep LAG_TICK_S over and over; record how late each wake-up is (the loop's own lag)."""
        tick = int(LAG_TICK_S * 1e9)
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(LAG_TICK_S)
            self.lags.append((time.time_ns(), max(0, time.perf_counter_ns() - t - tick)))

    async def _client(self, session, i: int) -> None:
        k = i
        while not self._stop.is_set():
            rid = f"{self.id_tag}-{k}"
            body = self.bodies[k % len(self.bodies)]
            if self.stamp is not None:
                head, tail = self.stamp[k % len(self.bodies)]
                body = head + json.dumps(rid).encode() + tail
            k += self.s.concurrency
            sent = self._sending[i] = time.time_ns()
            t0 = time.perf_counter_ns()
            status, data, err = await post(session, self.url, body, self.s.timeout_s, keep=KEEP_TEXT, request_id=rid)
            if err is None and not 200 <= status < 300:
                text = data[:120].decode("utf-8", "replace").strip()
                err = f"HTTP {status}: {text}" if text else f"HTTP {status}"
            t1 = time.perf_counter_ns()
            self.done.append(Completion(time.time_ns(), t1 - t0, err is None, err, sent))
            del self._sending[i]
            if status == 0:
                await asyncio.sleep(0.05)   # refused or reset: do not spin

