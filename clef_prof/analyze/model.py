"""analyze's result as types: one dataclass per block of the JSON contract (README, "JSON contract").

Every consumer (the renderers, the data model, compare, the manifest check, the CLI) reads a
`Result` by attribute; `Result.to_json()` is the documented JSON object, key order included, and
the one place where attribute names become JSON keys. Where a block is flattened into its parent
in the JSON (a stage's CUDA counts, its per-request figures, its share of the batch span), it is
still its own type here: the same `CudaCounts` holds a stage's, the batch range's, the work
outside stages and the capture's totals. Values are plain Python (int, float, str, None, lists and
dicts of them), so a result pickles and crosses processes (`analyze_many`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..config import StageConfig

SCHEMA = "clef-prof/analyze/1"


def _plain(obj) -> dict:
    """A flat dataclass's fields as a dict, in declaration order."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


class _Flat:
    """A dataclass of plain values whose JSON is its fields, in declaration order."""

    def to_json(self) -> dict:
        return _plain(self)


@dataclass
class CudaCounts(_Flat):
    """CUDA work placed in one slot (a stage, the batch range, outside stages, the capture): counts
    of API calls and GPU records. Every figure is None when CUDA was not traced; `graph_kernels`
    also when the capture cannot tell them, `graph_executions` without GRAPH_TRACE rows."""

    h2d_copies: int | None = None
    h2d_bytes: int | None = None
    h2d_pageable: int | None = None
    h2d_pinned: int | None = None
    d2h_copies: int | None = None
    d2h_bytes: int | None = None
    kernel_launches: int | None = None
    graph_launches: int | None = None
    graph_kernels: int | None = None
    gpu_kernels: int | None = None
    graph_executions: int | None = None
    memcpy_calls: int | None = None
    memset_calls: int | None = None
    sync_calls: int | None = None
    device_syncs: int | None = None
    sync_memcpy_calls: int | None = None

    @property
    def h2d_pinned_pct(self) -> float | None:
        """Pinned H2D copies as % of H2D copies (None without H2D copies)."""
        return None if not self.h2d_copies else 100.0 * self.h2d_pinned / self.h2d_copies


@dataclass
class CudaPerRequest:
    """CUDA counts divided by the capture's requests (None without requests or CUDA trace)."""

    h2d_copies: float | None = None
    h2d_bytes: float | None = None
    d2h_copies: float | None = None
    kernel_launches: float | None = None
    graph_launches: float | None = None

    def to_json(self, suffix: str = "") -> dict:
        return {f"{k}{suffix}": v for k, v in _plain(self).items()}


@dataclass
class BatchShare:
    """A stage's host time as % of its batch's host span, per batch (None without batches)."""

    mean_pct: float | None = None
    p50_pct: float | None = None
    p99_pct: float | None = None

    def to_json(self) -> dict:
        return {"share_of_batch_pct_mean": self.mean_pct, "share_of_batch_pct_p50": self.p50_pct,
                "share_of_batch_pct_p99": self.p99_pct}


@dataclass
class RangeFigures:
    """Host time and CUDA work of one range name's instances (a stage, or the batch range): total,
    per request, and mean/p50/p99 per batch (ms; None where there is nothing to divide)."""

    instances: int
    host_ns_total: int
    host_ms_total: float
    host_ms_per_request: float | None
    host_ms_mean: float | None
    host_ms_p50: float | None
    host_ms_p99: float | None
    cuda: CudaCounts
    cuda_per_request: CudaPerRequest

    def _host(self) -> dict:
        return {"host_ms_mean": self.host_ms_mean, "host_ms_p50": self.host_ms_p50, "host_ms_p99": self.host_ms_p99}


@dataclass
class StageFigures(RangeFigures):
    """One stage: its `RangeFigures`, its instances outside every batch range (counted in the stage
    figures, in no batch) and its share of the batch host span."""

    outside_batch_instances: int = 0
    outside_batch_host_ms_per_request: float | None = None
    share: BatchShare = field(default_factory=BatchShare)

    def to_json(self) -> dict:
        return {"instances": self.instances, "host_ns_total": self.host_ns_total, "host_ms_total": self.host_ms_total,
                "host_ms_per_request": self.host_ms_per_request,
                "outside_batch_instances": self.outside_batch_instances,
                "outside_batch_host_ms_per_request": self.outside_batch_host_ms_per_request,
                **self._host(), **self.cuda.to_json(), **self.cuda_per_request.to_json("_per_request"),
                **self.share.to_json()}


@dataclass
class BatchFigures(RangeFigures):
    """The batch range as a whole (JSON `pooler`), named by the configuration's batch range."""

    name: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "instances": self.instances, "host_ns_total": self.host_ns_total,
                "host_ms_total": self.host_ms_total, "host_ms_per_request": self.host_ms_per_request,
                **self._host(), **self.cuda.to_json(), **self.cuda_per_request.to_json("_per_request")}


@dataclass
class OutsideStages:
    """CUDA work in no stage: inside a batch range, and outside every batch range."""

    in_batch: CudaCounts
    outside_batch: CudaCounts

    def to_json(self) -> dict:
        return {"in_batch": self.in_batch.to_json(), "outside_batch": self.outside_batch.to_json()}


@dataclass
class PerRequest(CudaPerRequest):
    """The headline per request: the CUDA work launched in batch ranges and stages, the batch
    range's host ms (the stages' when there is no batch range) and the GPU busy ms of that work."""

    pooler_host_ms: float | None = None
    gpu_busy_ms: float | None = None


@dataclass
class Overlap(_Flat):
    """GPU busy (any work of the same process) during each batch's host span; None without CUDA
    trace or batches."""

    gpu_busy_fraction_of_pooler_span: float | None = None
    gpu_busy_fraction_p50: float | None = None
    gpu_busy_ms_in_pooler_span_per_request: float | None = None
    gpu_busy_ms_per_request: float | None = None


@dataclass
class Excluded:
    """Ranges cut by the capture window (by name), and stage instances outside every batch range."""

    cut_at_edges: dict[str, int]
    outside_batch_instances: int

    def to_json(self) -> dict:
        return {"cut_at_edges": dict(self.cut_at_edges), "outside_batch_instances": self.outside_batch_instances}


@dataclass
class RankFigures(_Flat):
    """One process holding batches: its first rank (replicas share one), whether its batches are the
    ones counted, its own batches, requests, host ms per request and GPU overlap."""

    pid: int
    first_rank_pid: int
    counted: bool
    batches: int
    requests: int
    host_ms_per_request: float | None
    gpu_busy_fraction_of_pooler_span: float | None


@dataclass
class ThreadFacts:
    """A thread holding stage ranges: ids, names, batches and stage instances (by stage; all, and
    those outside every batch range)."""

    pid: int
    tid: int
    process: str | None
    thread: str | None
    batches: int
    stage_instances: dict[str, int]
    outside_batch_instances: dict[str, int]

    def to_json(self) -> dict:
        return {**_plain(self), "stage_instances": dict(self.stage_instances),
                "outside_batch_instances": dict(self.outside_batch_instances)}


@dataclass
class CaptureFacts:
    """What the export says of itself: versions, session length, CUDA trace, and the threads."""

    nsys_version: str | None
    cuda_driver_version: int | None
    schema_version: str | None
    duration_s: float | None
    stage_window_s: tuple[float, float] | None      # first stage/batch start, last end (s)
    cuda_traced: bool
    graph_trace_mode: str | None
    threads: list[ThreadFacts]

    def to_json(self) -> dict:
        return {"nsys_version": self.nsys_version, "cuda_driver_version": self.cuda_driver_version,
                "schema_version": self.schema_version, "duration_s": self.duration_s,
                "stage_window_s": None if self.stage_window_s is None else list(self.stage_window_s),
                "cuda_traced": self.cuda_traced, "graph_trace_mode": self.graph_trace_mode,
                "threads": [t.to_json() for t in self.threads]}


@dataclass
class LostRecords(_Flat):
    """Lost CUDA records: launches and copies in batches or stages with no GPU record, memcpy records
    with no API call, batches dropped because CUDA records stop before NVTX."""

    kernel_launches_without_gpu_record: int
    memcpy_calls_without_gpu_record: int
    memcpy_records_without_call: int
    batches_after_cuda_end: int


@dataclass
class Finding(_Flat):
    """One rule that fired for one stage or scope. `evidence` holds the rule's own figures, each
    with its denominators (their names differ by rule: README, "Findings")."""

    id: str
    stage: str
    severity: str
    title: str
    summary: str
    evidence: dict
    advice: str
    expected: str


@dataclass
class Result:
    """Everything analyze found in one capture (README, "JSON contract")."""

    path: str
    requests: int | None
    requests_source: str | None
    batches: int
    config: StageConfig
    capture: CaptureFacts
    stages: dict[str, StageFigures]
    pooler: BatchFigures
    outside_stages: OutsideStages
    totals: CudaCounts
    per_request: PerRequest
    overlap: Overlap
    excluded: Excluded
    ranks: list[RankFigures]
    warnings: list[str]
    slots: list[str]                    # the categories of every `stage` column: stages, no stage, outside
    lost_records: LostRecords | None = None     # None without CUDA trace
    findings_thresholds: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    manifest: str | None = None         # the record manifest held against the capture, when there was one
    window_by_record: bool = False      # that manifest says record opened the window: cut edges are expected
    schema: str = SCHEMA

    def to_json(self) -> dict:
        """The JSON contract as a dict (`json.dumps` of it is `clef-prof analyze -f json`)."""
        cfg = self.config
        out = {"schema": self.schema, "path": self.path, "requests": self.requests,
               "requests_source": self.requests_source, "batches": self.batches,
               "config": {"domain": cfg.domain, "batch": cfg.batch, "stages": list(cfg.stages)},
               "capture": self.capture.to_json(),
               "stages": {name: s.to_json() for name, s in self.stages.items()},
               "pooler": self.pooler.to_json(), "outside_stages": self.outside_stages.to_json(),
               "totals": self.totals.to_json(), "per_request": self.per_request.to_json(),
               "overlap": self.overlap.to_json(), "excluded": self.excluded.to_json(),
               "ranks": [r.to_json() for r in self.ranks], "warnings": list(self.warnings), "slots": list(self.slots),
               "lost_records": None if self.lost_records is None else self.lost_records.to_json(),
               "findings_thresholds": dict(self.findings_thresholds),
               "findings": [f.to_json() for f in self.findings]}
        if self.manifest is not None:
            out["window_by_record"] = self.window_by_record
            out["manifest"] = self.manifest
        return out

    def figure(self, name: str):
        """One figure by its dotted JSON name (`per_request.h2d_copies`, `stages.head.host_ms_per_request`:
        compare's metric names); None where the result has no such figure."""
        node = self.to_json()
        for part in name.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node
