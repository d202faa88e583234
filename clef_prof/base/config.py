"""Which NVTX ranges describe a server's pooler. Standard library only, so that light
entry points (record, demo-server, inject) never import pandas."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .defaults import DEFAULT_BATCH, DEFAULT_DOMAIN, DEFAULT_STAGES
from .errors import ClefError


# clef-prof's Python sampler (annotate.sampler): the variable that asks for it in the server, and
# record's default rate (docs/sampling.md: its cost measured at 100 and 1,000 Hz)
ENV_PY_SAMPLING_HZ = "CLEF_PROF_PY_SAMPLING_HZ"
DEFAULT_PY_SAMPLING_HZ = 100
MAX_PY_SAMPLING_HZ = 10_000
# clef-prof's clock marks (annotate.clock): the variable, "1", that asks for them in the server,
# and the registered message of each mark (its int64 payload: the server's time.time_ns())
ENV_CLOCK_MARKS = "CLEF_PROF_CLOCK_MARKS"
CLOCK_MARK_MESSAGE = "clef-prof clock"


@dataclass(frozen=True)
class StageConfig:
    """The NVTX domain, the outer batch range and the stage names; `findings`: threshold
    overrides for the findings rules, as (key, value) pairs; `engine_id_pattern`: a regular
    expression whose one group turns an engine's id (in a batch's `rid=` list or an enqueue mark)
    into the request range's id (a spec's `[request].engine_id_pattern`; docs/journey.md)."""

    domain: str = DEFAULT_DOMAIN
    batch: str = DEFAULT_BATCH
    stages: tuple[str, ...] = DEFAULT_STAGES
    findings: tuple[tuple[str, float], ...] = ()
    engine_id_pattern: str | None = None
    # where it came from, said beside the figures: None (the defaults or flags), "spec PATH",
    # "recorded in MANIFEST"; not part of its identity (equal configurations are one cache key)
    source: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        """The snapshot `record` writes into its manifest ("stage_config")."""
        return {"domain": self.domain, "batch": self.batch, "stages": list(self.stages),
                "findings": {k: v for k, v in self.findings}, "engine_id_pattern": self.engine_id_pattern}

    @classmethod
    def from_dict(cls, data, where: str, source: str | None = None) -> "StageConfig":
        """A snapshot read back (to_dict's form); ClefError in one line when it is not one."""
        ok = isinstance(data, dict)
        stages = data.get("stages") if ok else None
        findings = data.get("findings", {}) if ok else None
        pattern = data.get("engine_id_pattern") if ok else None
        ok = (ok and isinstance(data.get("domain"), str) and isinstance(data.get("batch"), str) and data["batch"]
              and isinstance(stages, list) and bool(stages) and all(isinstance(s, str) and s for s in stages)
              and isinstance(findings, dict)
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                      for v in findings.values())
              and (pattern is None or isinstance(pattern, str)))
        if not ok:
            raise ClefError(f"{where}: \"stage_config\" is not a stage configuration (domain, batch, a list of "
                            "stages, findings thresholds); a damaged manifest: pass --spec or --stages")
        return cls(domain=data["domain"], batch=data["batch"], stages=tuple(stages),
                   findings=tuple((str(k), float(v)) for k, v in findings.items()),
                   engine_id_pattern=pattern, source=source)

def with_overrides(cfg: StageConfig, domain: str | None = None, batch: str | None = None, stages=None,
                   findings=()) -> StageConfig:
    """`cfg` with the given domain, batch name, stages (a sequence or "a,b,c") and threshold
    overrides ((key, value) pairs) over it."""
    if isinstance(stages, str):
        stages = tuple(s.strip() for s in stages.split(",") if s.strip())
    merged = dict(cfg.findings)
    merged.update(findings)
    same = domain is None and batch is None and not stages and not findings
    return StageConfig(source=cfg.source if same else None, domain=cfg.domain if domain is None else domain, batch=cfg.batch if batch is None else batch,
                       stages=tuple(stages) if stages else cfg.stages, findings=tuple(merged.items()),
                       engine_id_pattern=cfg.engine_id_pattern)


# the record manifest: written by clef_prof.record.manifest, read by clef_prof.analyze.read.manifest
MANIFEST_SCHEMA = "clef-prof/record/1"
MANIFEST = "manifest.json"
STATUS_OK = "ok"
STATUS_DIED = "server died"
STATUS_INTERRUPTED = "interrupted"
STATUS_FAILED = "failed"


# findings thresholds: the defaults clef_prof.analyze.judge.findings' rules use, overridden by a spec's
# [findings] table or --threshold
THRESHOLDS: dict[str, float] = {
    "pageable_min_per_request": 0.5,      # pageable H2D copies per request in a stage
    "pack_min_copies_per_request": 3.0,   # H2D copies per request in a stage ...
    "pack_max_bytes_per_copy": 65536.0,   # ... of at most this mean size (B)
    "sync_max_per_batch": 1.0,            # synchronizing calls per batch a stage may make (one readback)
    "graph_min_launches_per_request": 10.0,  # kernel launches per request in a stage with no graph launch
    "overlap_max_pct": 50.0,              # GPU busy % of the batch host span below which the host bounds it
    "dominant_share_pct": 50.0,           # a stage's mean % of the batch host span
    "outside_min_pct": 1.0,               # CUDA work calls outside every stage, % of the capture's
    "p99_min_batches": 100.0,             # batches for a p99 with at least one batch beyond it
}


class ThresholdError(ClefError):
    """An unknown or invalid findings threshold."""


def thresholds(overrides=()) -> dict[str, float]:
    """THRESHOLDS with `overrides` ((key, value) pairs or a dict) applied and checked."""
    out = dict(THRESHOLDS)
    for key, value in (overrides.items() if isinstance(overrides, dict) else overrides):
        if key not in THRESHOLDS:
            raise ThresholdError(f"unknown findings threshold {key!r} (known: {', '.join(THRESHOLDS)})")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ThresholdError(f"findings threshold {key}: {value!r} is not a number") from None
        if not math.isfinite(v) or v < 0:
            raise ThresholdError(f"findings threshold {key}: {value!r} must be a finite number >= 0")
        out[key] = v
    return out


def parse_threshold(text: str) -> tuple[str, float]:
    """'KEY=VALUE' (the --threshold flag) -> (key, value), checked."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ThresholdError(f"--threshold {text!r}: expected KEY=VALUE, e.g. overlap_max_pct=30")
    key = key.strip()
    return key, thresholds({key: value.strip()})[key]
