"""The metrics a stored result contributes to its series, read from its JSON contract (docs/json.md).

- `analyze` (clef-prof/analyze/1): host ms per request of the batch and of each stage, the p50
  and p99 of the batch's host ms per batch, each stage's p99; H2D copies and bytes, D2H copies,
  kernel and graph launches per request (of the batch and of each stage); GPU busy ms per request
  and the two overlap fractions. One series (`''`), or `arm=NAME` when a record manifest names
  the capture's arm.
- `compare` (clef-prof/compare/1): each arm's figure of every metric, one series per arm
  (`arm=NAME`); compare's own `deterministic` says which counts are exact.
- `bench` (clef-prof/bench/2): each case's and arm's throughput, latency p50/p90/p99/mean and any
  goodput figure (`case=LABEL arm=NAME`).

A count per request is exact when compare says so, or, from analyze, when it is a whole number
(9 copies, 3424 bytes, 15 launches per request: one multiple of the batch size throughout); a
fractional count (one D2H copy per batch) varies with the batching and is judged as noise is.
A figure that is null (CUDA not traced, no requests) is not a point.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..base.errors import ClefError

SCHEMAS = {"clef-prof/analyze/1": "analyze", "clef-prof/compare/1": "compare", "clef-prof/bench/2": "bench"}
COUNT_KEYS = ("h2d_copies", "h2d_bytes", "d2h_copies", "kernel_launches", "graph_launches")
STAGE_COUNT_KEYS = ("h2d_copies", "h2d_bytes", "d2h_copies", "kernel_launches", "graph_launches")
BENCH_KEYS = ("throughput_rps", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_ms_mean")
UNITS = {"h2d_bytes": "B/request", "h2d_copies": "copies/request", "d2h_copies": "copies/request",
         "kernel_launches": "launches/request", "graph_launches": "launches/request"}
COMPARE_UNITS = {"host_ms": "ms/request", "gpu_ms": "ms/request", "bytes": "B/request", "count": "/request",
                 "fraction": "fraction"}
# metrics whose fall is the regression (the others: a rise is)
HIGHER_IS_BETTER = ("throughput_rps", "goodput", "gpu_busy_fraction")


class PayloadError(ClefError):
    """A JSON document that is not a result this clef-prof stores."""


@dataclass(frozen=True)
class Figure:
    series: str
    metric: str
    unit: str
    value: float
    exact: bool


@dataclass(frozen=True)
class Described:
    kind: str
    schema: str
    capture: str
    spec: str
    figures: list[Figure]


def higher_is_better(metric: str) -> bool:
    return any(k in metric for k in HIGHER_IS_BETTER)


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _whole(v: float) -> bool:
    return abs(v - round(v)) <= 1e-9 * max(1.0, abs(v))


def _analyze(doc: dict) -> list[Figure]:
    man = doc.get("manifest") if isinstance(doc.get("manifest"), dict) else {}
    series = f"arm={man['arm']}" if isinstance(man.get("arm"), str) and man.get("arm") else ""
    out: list[Figure] = []

    def put(metric, unit, value, exact=False):
        v = _num(value)
        if v is not None:
            out.append(Figure(series, metric, unit, v, bool(exact and _whole(v))))

    pr = doc.get("per_request") or {}
    put("per_request.pooler_host_ms", "ms/request", pr.get("pooler_host_ms"))
    pooler = doc.get("pooler") or {}
    put("pooler.host_ms_p50", "ms/batch", pooler.get("host_ms_p50"))
    put("pooler.host_ms_p99", "ms/batch", pooler.get("host_ms_p99"))
    stages = doc.get("stages") or {}
    for name, st in stages.items():
        if not isinstance(st, dict):
            continue
        put(f"stages.{name}.host_ms_per_request", "ms/request", st.get("host_ms_per_request"))
        put(f"stages.{name}.host_ms_p99", "ms/batch", st.get("host_ms_p99"))
    for k in COUNT_KEYS:
        put(f"per_request.{k}", UNITS[k], pr.get(k), exact=True)
    for name, st in stages.items():
        if isinstance(st, dict):
            for k in STAGE_COUNT_KEYS:
                put(f"stages.{name}.{k}_per_request", UNITS[k], st.get(f"{k}_per_request"), exact=True)
    put("per_request.gpu_busy_ms", "ms/request", pr.get("gpu_busy_ms"))
    ov = doc.get("overlap") or {}
    put("overlap.gpu_busy_fraction_of_pooler_span", "fraction", ov.get("gpu_busy_fraction_of_pooler_span"))
    put("overlap.gpu_busy_fraction_of_batch_spans", "fraction", ov.get("gpu_busy_fraction_of_batch_spans"))
    return out


def _compare(doc: dict) -> list[Figure]:
    out = []
    for m in doc.get("metrics") or []:
        if not isinstance(m, dict) or not isinstance(m.get("metric"), str):
            continue
        unit = COMPARE_UNITS.get(m.get("kind"), m.get("unit") or "")
        for arm, a in (m.get("arms") or {}).items():
            v = _num((a or {}).get("mean"))
            if v is not None:
                out.append(Figure(f"arm={arm}", m["metric"], unit, v, bool(m.get("deterministic"))))
    return out


def _bench(doc: dict) -> list[Figure]:
    if doc.get("status") != "ok":
        raise PayloadError(f"a bench run that did not finish (status {doc.get('status')!r}): nothing to store")
    out = []
    for c in doc.get("cases") or []:
        if not isinstance(c, dict):
            continue
        label = str(c.get("label") or json.dumps(c.get("case"), sort_keys=True))
        for arm, a in (c.get("arms") or {}).items():
            if not isinstance(a, dict):
                continue
            keys = [*BENCH_KEYS, *sorted(k for k in a if k.startswith("goodput"))]
            for k in keys:
                v = _num(a.get(k))
                if v is not None:
                    unit = "req/s" if k.endswith("_rps") else "ms" if "_ms" in k else ""
                    out.append(Figure(f"case={label} arm={arm}", k, unit, v, False))
    return out


def _spec(doc: dict, kind: str) -> str:
    if kind == "bench":
        return json.dumps({"cases": [c.get("case") for c in doc.get("cases") or [] if isinstance(c, dict)]},
                          sort_keys=True)
    cfg = doc.get("config") or {}
    return json.dumps({k: cfg.get(k) for k in ("domain", "batch", "stages")}, sort_keys=True)


def _capture(doc: dict, kind: str) -> str:
    if kind == "analyze":
        return str(doc.get("path") or "")
    arms = doc.get("arms") or {}
    if kind == "compare":
        return json.dumps({a: (v or {}).get("exports") for a, v in arms.items()}, sort_keys=True)
    return json.dumps({a: (v or {}).get("command") for a, v in arms.items()}, sort_keys=True)


def describe(doc) -> Described:
    """The kind, identity and figures of one result; a document that is not one is refused."""
    if not isinstance(doc, dict):
        raise PayloadError("not a clef-prof result (a JSON object with a \"schema\" is expected)")
    schema = doc.get("schema")
    kind = SCHEMAS.get(schema)
    if kind is None:
        known = ", ".join(SCHEMAS)
        if isinstance(schema, str) and schema.startswith("clef-prof/"):
            raise PayloadError(f"a result of schema {schema}, which this clef-prof does not store (it reads {known})")
        raise PayloadError(f"not a clef-prof result (schema {schema!r}; expected one of {known})")
    figures = {"analyze": _analyze, "compare": _compare, "bench": _bench}[kind](doc)
    return Described(kind, schema, _capture(doc, kind), _spec(doc, kind), figures)
