"""Server-side figures of a running server from its Prometheus `/metrics`, scraped on a thread.

Every `interval_s` during a server's windows, GET the endpoint and parse the text exposition
format with `prometheus_client`'s parser; keep the queue depth and the running requests where
the server exports them (vLLM, SGLang, `clef-prof demo-server`), summed over label sets (one
per model or engine). A window's figures are the mean and the highest of the samples taken in
it. An endpoint that does not answer or does not parse is said once; the bench goes on.
"""
from __future__ import annotations

import time
import urllib.error
import urllib.request

from .monitor import Poller

GAUGES = {  # figure: the metric names that carry it
    "queue_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "clef_demo_num_requests_waiting"),
    "requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs", "clef_demo_num_requests_running"),
}
MAX_BYTES = 8 * 1024 * 1024


class ScrapeError(Exception):
    pass


def parse(text: str) -> dict[str, float]:
    """The GAUGES figures present in an exposition text (ScrapeError when it does not parse)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for key, names in GAUGES.items():
                if fam.name in names:
                    out[key] = out.get(key, 0.0) + sum(float(s.value) for s in fam.samples if s.name == fam.name)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ScrapeError(f"not the Prometheus text format ({str(exc)[:80]})") from None
    return out


def fetch(url: str, timeout: float = 2.0) -> dict[str, float]:
    """One scrape of `url` (ScrapeError when it does not answer 200 or does not parse)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read(MAX_BYTES)
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ScrapeError(str(getattr(exc, "reason", None) or exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScrapeError("not text (UTF-8)") from None
    return parse(text)


class Scraper(Poller):
    """`Scraper(url).start()`, `window(t0_ns, t1_ns)` for the figures of a span, `stop()`."""

    name = "clef-prof-scrape"

    def __init__(self, url: str, interval_s: float = 0.5):
        super().__init__(interval_s)
        self.url = url
        self.samples: list[tuple[int, dict[str, float]]] = []
        self.failures = 0
        self.first_error: str | None = None

    def poll(self) -> None:
        t = time.monotonic_ns()
        try:
            got = fetch(self.url, timeout=max(1.0, self.interval_s * 4))
        except ScrapeError as exc:
            with self._lock:
                self.failures += 1
                self.first_error = self.first_error or str(exc)
        else:
            with self._lock:
                self.samples.append((t, got))

    def window(self, t0_ns: int, t1_ns: int) -> dict:
        """Mean and highest of each figure over the samples taken in [t0, t1], and their count."""
        with self._lock:
            got = [v for t, v in self.samples if t0_ns <= t <= t1_ns]
        out: dict = {"metrics_samples": len(got)}
        for key in GAUGES:
            vals = [v[key] for v in got if key in v]
            if vals:
                out[key + "_mean"] = sum(vals) / len(vals)
                out[key + "_max"] = max(vals)
        return out

    def note(self) -> str | None:
        with self._lock:
            if not self.failures:
                return None
            return (f"GET {self.url}: {self.failures} of {self.failures + len(self.samples)} scrapes failed "
                    f"(first: {self.first_error})")
