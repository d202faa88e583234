"""Load for `clef-prof bench` over aiohttp: request presets, response checks, fixed-length windows.

A window sends for `window_s` seconds, then lets the requests in flight finish (drain); its
elapsed time runs from the first send to the last answer, so drained requests count in both
the completions and the time. Closed loop: C workers, each sends the next request when its
answer is in. Open loop (`rate`): Poisson arrivals at a fixed rate, seeded by case and window
(the same schedule for every server), at most C connections; latency runs from the *scheduled*
send time, so a slow server cannot hide its queueing (coordinated omission).
"""
from __future__ import annotations

import asyncio
import bisect
import importlib
import json
import random
import re
import time
from dataclasses import dataclass

from ..base.errors import ClefError
from ..record.load import KEEP_TEXT, VOCAB, make_bodies, percentile, post

PRESETS = {  # name: (request path, health path)
    "demo": ("/v1/systemone", "/health"),
    "vllm-embeddings": ("/v1/embeddings", "/health"),
    "vllm-pooling": ("/pooling", "/health"),
    "raw": ("/", "/health"),
}


@dataclass(frozen=True)
class Case:
    concurrency: int
    words: int = 200
    questions: int = 1
    rate: float | None = None        # open loop: arrivals per second

    def label(self) -> str:
        s = f"C={self.concurrency} {self.words} words / {self.questions} q"
        return s + (f" @ {self.rate:g}/s" if self.rate else "")

    def as_dict(self) -> dict:
        return {"concurrency": self.concurrency, "words": self.words, "questions": self.questions, "rate": self.rate}


# ---------------------------------------------------------------------------------------------
# bodies


def _texts(words: int, n: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(VOCAB) for _ in range(max(1, words))) for _ in range(n)]


def read_raw_bodies(path: str) -> list[bytes]:
    """A JSON file (one body) or JSON Lines (one body a line, cycled)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ClefError(f"--body {path}: {exc.strerror or exc}") from None
    try:
        json.loads(data)
        return [data.strip()]
    except ValueError:
        pass
    out = []
    for i, line in enumerate(data.splitlines(), 1):
        if line.strip():
            try:
                json.loads(line)
            except ValueError as exc:
                raise ClefError(f"--body {path}: line {i} is not JSON ({exc}); give one JSON body or JSON Lines") from None
            out.append(line.strip())
    if not out:
        raise ClefError(f"--body {path}: no JSON body in the file")
    return out


def bodies_for(preset: str, case: Case, n: int, seed: int, model: str | None = None,
               raw: list[bytes] | None = None) -> list[bytes]:
    """n request bodies of a case (cycled by the load); the same seed gives the same bodies."""
    if preset == "raw":
        return list(raw or [])
    if preset == "demo":
        return make_bodies(case.words, case.questions, n=n, seed=seed)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        texts = _texts(case.words, max(1, case.questions), rng)
        body = {"model": model, "input": texts[0] if case.questions <= 1 else texts}
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out


# ---------------------------------------------------------------------------------------------
# response checks


def make_check(spec: str | None):
    """--check-response: a dotted path that must exist in the JSON answer (`answers.q0.score`,
    `data[0].embedding`, `$.words`), or `module:callable` called as f(response, request) on the
    parsed JSON, returning True/None when right, False or a reason string when wrong.

    The check returned takes (response bytes, request bytes) and gives None or an error kind."""
    if not spec:
        return None
    if ":" in spec:
        mod, _, name = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError) as exc:
            raise ClefError(f"--check-response {spec!r}: cannot load {name} from {mod} ({exc})") from None
        if not callable(fn):
            raise ClefError(f"--check-response {spec!r}: {name} is not callable")

        def check(data: bytes, body: bytes):
            try:
                res = fn(json.loads(data), json.loads(body))
            except Exception as exc:
                return f"check: {type(exc).__name__}: {str(exc)[:80]}"
            if res is None or res is True:
                return None
            return f"check: {str(res)[:80]}" if isinstance(res, str) else f"check: {name} returned {res!r}"[:100]
        return check
    path = [p for p in re.split(r"\.|\[(\d+)\]", spec.removeprefix("$").strip(".")) if p]
    if not path:
        raise ClefError(f"--check-response {spec!r}: expected a dotted path such as answers.q0.score or module:callable")

    def check(data: bytes, body: bytes):
        try:
            node = json.loads(data)
        except ValueError:
            return "check: the answer is not JSON"
        for key in path:
            if isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            elif isinstance(node, dict) and key in node:
                node = node[key]
            else:
                return f"check: {spec} missing"
        return None
    return check


def demo_words(response, request):
    """A --check-response callable for the demo server: the answer counts the request's words."""
    n = len(request["state"].split())
    return True if response.get("words") == n else f"words {response.get('words')} != {n}"


# ---------------------------------------------------------------------------------------------
# requests and windows


async def send(session, url: str, body: bytes, timeout: float, check=None,
               whole: bool = False) -> tuple[int, str | None, bytes]:
    """POST one body: (HTTP status, 0 when no answer came; None or an error kind; the answer:
    whole when it is checked or `whole`, else its first KEEP_TEXT bytes)."""
    status, data, err = await post(session, url, body, timeout, keep=None if check or whole else KEEP_TEXT)
    if err is None and status >= 300:
        err = f"HTTP {status}"
    elif err is None and check:
        err = check(data, body)
    return status, err, data


@dataclass
class Window:
    """What one window did: (scheduled send, answer, error kind) per request, monotonic ns."""

    t0_ns: int
    t_end_ns: int
    records: list
    offered: int | None = None     # open loop: arrivals scheduled in the window

    def summary(self, slo_ms: float | None = None) -> dict:
        """The window's figures; with `slo_ms`, also goodput: successful answers within `slo_ms` of
        their (scheduled) send per second of the window's elapsed time (`good`: their count)."""
        ok = sorted((d - s) / 1e6 for s, d, e in self.records if e is None)
        kinds: dict[str, int] = {}
        for _, _, e in self.records:
            if e is not None:
                kinds[e] = kinds.get(e, 0) + 1
        last = max((d for _, d, _ in self.records), default=self.t_end_ns)
        elapsed = (max(last, self.t_end_ns) - self.t0_ns) / 1e9
        out = {"completions": len(ok), "errors": len(self.records) - len(ok), "error_kinds": kinds,
               "elapsed_s": round(elapsed, 4), "send_s": round((self.t_end_ns - self.t0_ns) / 1e9, 4), "drain_s": round(max(0, last - self.t_end_ns) / 1e9, 4),
               "throughput_rps": len(ok) / elapsed if elapsed > 0 else 0.0,
               "latency_ms_p50": percentile(ok, 50), "latency_ms_p90": percentile(ok, 90),
               "latency_ms_p99": percentile(ok, 99), "latency_ms_mean": sum(ok) / len(ok) if ok else None}
        if self.offered is not None:
            out["offered"] = self.offered
        if slo_ms is not None:
            good = bisect.bisect_right(ok, slo_ms)
            out.update(slo_ms=slo_ms, good=good, goodput_rps=good / elapsed if elapsed > 0 else 0.0)
        return out


async def run_window(session, url: str, bodies: list[bytes], case: Case, window_s: float, timeout: float,
                     check=None, abort=None, seed: int = 0, start_at: int = 0) -> Window:
    """One window of a case; `abort` (a threading.Event) ends it early (the server died)."""
    recs: list = []
    t0 = time.monotonic_ns()
    t_end = t0 + int(window_s * 1e9)

    def stopped() -> bool:
        return abort is not None and abort.is_set()

    async def one(sched: int, body: bytes) -> None:
        status, err, _ = await send(session, url, body, timeout, check)
        recs.append((sched, time.monotonic_ns(), err))
        if status == 0:
            await asyncio.sleep(0.05)         # refused, reset or timed out: do not spin

    if not case.rate:
        async def worker(i: int) -> None:
            k = start_at + i
            while time.monotonic_ns() < t_end and not stopped():
                await one(time.monotonic_ns(), bodies[k % len(bodies)])
                k += case.concurrency
        await asyncio.gather(*(worker(i) for i in range(case.concurrency)))
        return Window(t0, t_end, recs)
    rng = random.Random(seed)
    tasks, k, at = [], start_at, t0
    while not stopped():
        at += int(rng.expovariate(case.rate) * 1e9)
        if at >= t_end:
            break
        delay = (at - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(at, bodies[k % len(bodies)])))
        k += 1
    await asyncio.gather(*tasks)
    return Window(t0, t_end, recs, offered=len(tasks))


async def warm_up(session, url: str, bodies: list[bytes], concurrency: int, seconds: float, timeout: float,
                  check=None, abort=None) -> dict:
    """Closed-loop load for `seconds` and until max(C, 8) requests succeeded (at most 60 s more)."""
    need = max(concurrency, 8)
    t0 = time.monotonic()
    ok = errors = 0
    first_error = None
    while not (abort is not None and abort.is_set()):
        w = await run_window(session, url, bodies, Case(concurrency), min(1.0, max(0.05, seconds)), timeout, check,
                             abort)
        s = w.summary()
        ok += s["completions"]
        errors += s["errors"]
        first_error = first_error or next(iter(s["error_kinds"]), None)
        spent = time.monotonic() - t0
        if spent >= seconds and ok >= need or spent > seconds + 60:
            break
    return {"seconds": round(time.monotonic() - t0, 3), "completions": ok, "errors": errors,
            "first_error": first_error, "needed": need}


async def fetch_all(session, url: str, bodies: list[bytes], timeout: float, concurrency: int = 8) -> list:
    """Parity: every body once, at most `concurrency` at a time; (error kind, answer) in body order."""
    sem = asyncio.Semaphore(concurrency)

    async def one(b: bytes):
        async with sem:
            _, err, data = await send(session, url, b, timeout, whole=True)
            return err, data
    return await asyncio.gather(*(one(b) for b in bodies))


# ---------------------------------------------------------------------------------------------
# parity


def first_difference(a, b, tol: float, where: str = "$") -> str | None:
    """Where two parsed JSON answers differ (numbers within `tol` are equal); None when they match."""
    if isinstance(a, bool) or isinstance(b, bool):
        return None if a == b else f"{where}: {a!r} != {b!r}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return None if abs(a - b) <= tol else f"{where}: {a!r} != {b!r}"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            d = first_difference(a[k], b[k], tol, f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, tol, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {str(a)[:60]!r} != {str(b)[:60]!r}"


def compare_answers(ref: tuple, got: tuple, tol: float) -> str | None:
    """None when two (error, answer) pairs match, else why not."""
    (e1, d1), (e2, d2) = ref, got
    if e1 or e2:
        return None if e1 == e2 else f"{e1 or 'ok'} != {e2 or 'ok'}"
    try:
        a, b = json.loads(d1), json.loads(d2)
    except ValueError:
        return None if d1 == d2 else "answers differ (not JSON)"
    return first_difference(a, b, tol)
