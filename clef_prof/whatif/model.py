"""The typed records of a what-if experiment: what the runner measures (one `Observation` per
fresh server) and what the analysis returns (`WhatIf`), consumed by every renderer."""
from __future__ import annotations

from dataclasses import dataclass, field

METRICS = ("throughput_rps", "p50_ms", "p99_ms", "goodput_rps")


@dataclass(frozen=True)
class Observation:
    """One fresh server at one delay level of one stage (the unit of every interval).

    `stage` is None for a baseline server (no delay), shared by every stage's regression.
    `level` is the requested delay in `unit`: "us" (µs added per call) or "frac" (a fraction of
    the stage's own time per call). `added_ms_per_request` is what the server reports it injected
    (total injected time / requests completed), the regression's x; `stage_ms_per_request` the
    stage's own host time per request without the injected part, measured in the server.
    `metrics` maps a name of METRICS to the server's mean over its windows (absent: not measured).
    `slot` is the server's position in the run order (for the drift check); `failed` says why a
    server gave no figures (its metrics are then empty)."""
    stage: str | None
    level: float
    unit: str
    slot: int
    added_ms_per_request: float
    stage_ms_per_request: float
    calls_per_request: float
    windows: int
    metrics: dict[str, float] = field(default_factory=dict)
    failed: str | None = None
