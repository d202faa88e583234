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
    server gave no figures (its metrics are then empty). `per_stage` holds, for every stage the
    experiment wrapped, its "calls_per_request", "own_ms_per_request" and "added_ms_per_request"
    in this server (a baseline server's `stage_ms_per_request` and `calls_per_request` are its
    first stage's; each stage's regression reads its own from here)."""
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
    per_stage: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Slope:
    """The response of one metric to one stage's added host time, over servers as units.

    `per_ms` is the change in the metric (its own unit) per +1 ms of added host time per request,
    with its `confidence` interval [lo, hi]; `pct_per_ms` the same in % of the baseline servers'
    mean; `pct_per_pct` the % change per +1% of the stage's own time per request.
    `hidden` is True when the interval contains 0 (not on the critical path at this load), with
    `detectable_pct_per_ms` the smallest slope the design could detect. `verdict` is "critical",
    "hidden" or "too few servers" (then `needed` says the design that would be enough).
    `linear`: None below 3 levels (not testable), else whether no level departs from the line;
    `bend` says where it does; the slope is fitted up to `linear_max_ms` (added ms per request),
    the top of the range any extrapolation may span. `se`, `df`: of `per_ms`; `base_weight`: the
    weight of each baseline server in `per_ms` (slopes of two stages share those servers: their
    covariance, for a prediction's total). `implied`: the effect of a speed-up (`Implied`)."""
    stage: str
    metric: str
    baseline_mean: float
    per_ms: float
    lo: float
    hi: float
    pct_per_ms: float
    pct_lo: float
    pct_hi: float
    pct_per_pct: float | None
    servers: int
    levels: int
    verdict: str
    hidden: bool
    detectable_pct_per_ms: float | None = None
    linear: bool | None = None
    bend: str | None = None
    linear_max_ms: float | None = None
    needed: str | None = None
    se: float | None = None
    df: float | None = None
    base_weight: float | None = None
    implied: "Implied | None" = None


@dataclass(frozen=True)
class Implied:
    """The change in a metric (% of the baseline) if the stage took `speedup_pct` % less host time
    per request (`delta_ms`, negative): the slope extrapolated below the measured range (an
    extrapolation, always labelled), only as far as the measured linear range reaches above 0;
    beyond it `refused` says why and there is no figure."""
    stage: str
    metric: str
    speedup_pct: float
    delta_ms: float
    change_pct: float | None
    lo: float | None
    hi: float | None
    refused: str | None = None


@dataclass(frozen=True)
class StageResult:
    """One stage's slopes, one per measured metric, and its design."""
    stage: str
    stage_ms_per_request: float
    slopes: tuple[Slope, ...]


@dataclass(frozen=True)
class WhatIf:
    """The analysis of a what-if experiment: per stage, per metric slopes with intervals."""
    confidence: float
    stages: tuple[StageResult, ...]
    baseline_servers: int
    failed_servers: int
    drift: str | None = None
    speedup_pct: float | None = None
