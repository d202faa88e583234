"""analyze's result as types: one dataclass per block of the JSON contract (docs/json.md, "analyze").

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

from ..base.config import StageConfig

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
    """The batch range as a whole (JSON `pooler`), named by the configuration's batch range.
    `host_ms_total` sums the batch spans (two batches in flight at once both count);
    `span_union_ms_total` is the wall time in which at least one batch range is open, per process
    (the union of its batch spans), summed over processes."""

    name: str = ""
    span_union_ms_total: float = 0.0

    def to_json(self) -> dict:
        return {"name": self.name, "instances": self.instances, "host_ns_total": self.host_ns_total,
                "host_ms_total": self.host_ms_total, "host_ms_per_request": self.host_ms_per_request,
                **self._host(), **self.cuda.to_json(), **self.cuda_per_request.to_json("_per_request"),
                "span_union_ms_total": self.span_union_ms_total}


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
    """GPU busy (any work of the same process) during the batch host spans; None without CUDA
    trace or batches. Per capture (the `pooler_span` figures) within the union of the batch spans
    of each process, so GPU time under two batches in flight at once counts once; per batch (p50,
    and the `batch_spans` sums) within each batch's own span (docs/overlap.md)."""

    gpu_busy_fraction_of_pooler_span: float | None = None       # per capture: within the union of the spans
    gpu_busy_fraction_p50: float | None = None                  # per batch: within its own span
    gpu_busy_ms_in_pooler_span_per_request: float | None = None  # per capture: within the union of the spans
    gpu_busy_ms_per_request: float | None = None
    gpu_busy_fraction_of_batch_spans: float | None = None       # summed per batch: concurrent batches count twice
    gpu_busy_ms_in_batch_spans_per_request: float | None = None  # summed per batch, likewise


@dataclass
class Excluded:
    """Ranges cut by the capture window (by name), stage instances outside every batch range, and
    batch ranges nested in another batch range of their thread (not counted)."""

    cut_at_edges: dict[str, int]
    outside_batch_instances: int
    nested_batch_ranges: int = 0     # batch ranges inside another of their thread: counted as the outermost

    def to_json(self) -> dict:
        return {"cut_at_edges": dict(self.cut_at_edges), "outside_batch_instances": self.outside_batch_instances,
                "nested_batch_ranges": self.nested_batch_ranges}


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
    # a capture read from another profiler's trace (analyze.read.kineto): its format, files, time
    # precision, and the figures it cannot give with the reason; None for an nsys export
    source: dict | None = None

    def to_json(self) -> dict:
        out = {"nsys_version": self.nsys_version, "cuda_driver_version": self.cuda_driver_version,
               "schema_version": self.schema_version, "duration_s": self.duration_s,
               "stage_window_s": None if self.stage_window_s is None else list(self.stage_window_s),
               "cuda_traced": self.cuda_traced, "graph_trace_mode": self.graph_trace_mode,
               "threads": [t.to_json() for t in self.threads]}
        if self.source is not None:
            out["source"] = self.source
        return out


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
    with its denominators (their names differ by rule: docs/analyze.md, "Findings")."""

    id: str
    stage: str
    severity: str
    title: str
    summary: str
    evidence: dict
    advice: str
    expected: str


@dataclass
class SegmentFigures(_Flat):
    """One segment of the request journeys (or one stage of their batches), across the complete
    journeys: mean/p50/p99 ms per request and its share (%) of their summed end-to-end; the same
    over the tail (the requests at or above the p99 of end-to-end)."""

    mean_ms: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    share_pct: float | None = None
    tail_mean_ms: float | None = None
    tail_share_pct: float | None = None


@dataclass
class ClientCheck(_Flat):
    """The journeys' mean end-to-end against the load generator's mean latency in the same window
    (the record manifest): the client's is the larger by the network and its own loop, up to
    `allowance_ms`; beyond that (or a journey longer than the client saw) `agrees` is False."""

    journey_e2e_ms_mean: float
    client_latency_ms_mean: float
    client_completions: int | None
    gap_ms: float
    allowance_ms: float
    agrees: bool
    client_loop_lag_ms: float | None = None     # the client loop's measured mean lag per wake-up (manifest)


@dataclass
class Journey:
    """Per-request journeys (clef_prof.analyze.figures.journey; docs/journey.md): request ranges joined by
    id to their enqueue mark and batch, and to their own encode, cut into segments that sum to the
    end-to-end span. Figures are over the `complete` journeys (not cut by the capture window, with
    a batch); the others are counted and their ids listed (up to 20 per kind)."""

    request_ranges: int                 # request ranges in the capture
    complete: int                       # journeys in the figures
    cut_by_window: int                  # request ranges still open at the capture's end
    without_batch: int                  # not cut, but no batch in the capture names their id
    without_enqueue: int                # complete journeys without an enqueue mark
    without_encode: int                 # complete journeys without an encode of their own
    out_of_order: int                   # complete journeys with a point before the one it follows
    batch_ids: int                      # request ids named by the batches' rid= lists
    unclaimed_batch_ids: int            # of those, ids no request range took
    batches_with_cut_ids: int           # batches whose rid= list was cut (`...`)
    tail_requests: int                  # complete journeys at or above the p99 of end-to-end
    e2e_ms_mean: float | None
    e2e_ms_p50: float | None
    e2e_ms_p99: float | None
    segments: dict[str, SegmentFigures]
    batch_stages: dict[str, SegmentFigures]     # the batch segment by its batch's stages, plus (no stage)
    listed: dict[str, list[str]]        # "cut_by_window", "reversed", "without_batch", "unclaimed_batch_ids": ids
    client: ClientCheck | None = None
    renamed_batch_ids: int = 0          # batch ids the engine id pattern turned into request ids
    replica_batch_ids: int = 0          # ids named by replica ranks' batches, counted once with the first rank's
    reversed: int = 0                   # request ranges that end before they start (damaged rows): in no figure
    duplicate_requests: int = 0         # request ranges repeating another exactly (thread, start, end, id): counted once
    duplicate_marks: int = 0            # enqueue marks repeating another exactly (thread, time, id): counted once

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["segments"] = {k: v.to_json() for k, v in self.segments.items()}
        out["batch_stages"] = {k: v.to_json() for k, v in self.batch_stages.items()}
        out["listed"] = {k: list(v) for k, v in self.listed.items()}
        out["client"] = None if self.client is None else self.client.to_json()
        return out


@dataclass
class FunctionSamples(_Flat):
    """One Python function (name and file) in one stage's samples: self samples (its frame the
    innermost: the line that called into C for a thread in C code) and inclusive samples (on the
    stack at all, once per sample), each as a count, a share of the stage's samples with its
    Wilson interval, and the ms per request it stands for (samples x ms per sample / requests)."""

    function: str
    file: str
    self_samples: int
    inclusive_samples: int
    self_share: float
    self_share_low: float
    self_share_high: float
    inclusive_share: float
    inclusive_share_low: float
    inclusive_share_high: float
    self_ms_per_request: float | None
    inclusive_ms_per_request: float | None


@dataclass
class SampleFigures:
    """One stage's samples (or "(batch)": in a batch range, no stage; "(outside)": in neither):
    their count, share of all samples, the ms per request they stand for, whether they are too
    few (< 30) for their shares to be a measurement, and the top functions by self and by
    inclusive samples (up to 10 each)."""

    samples: int
    share_of_samples: float
    ms_per_request: float | None
    few: bool
    top_self: list[FunctionSamples]
    top_inclusive: list[FunctionSamples]
    idle_samples: int = 0           # whose leaf is a wait (select, poll, wait, sleep, acquire...): parked, not work

    def to_json(self) -> dict:
        return {"samples": self.samples, "share_of_samples": self.share_of_samples,
                "ms_per_request": self.ms_per_request, "few": self.few, "idle_samples": self.idle_samples,
                "top_self": [f.to_json() for f in self.top_self],
                "top_inclusive": [f.to_json() for f in self.top_inclusive]}


@dataclass
class Samples:
    """Python samples per stage (clef_prof.analyze.figures.samples; docs/sampling.md): the sampler, the
    rate asked and observed, the ms one sample stands for, what was left out, and per slot its
    `SampleFigures` (the stages in order, then "(batch)" and "(outside)" when they hold samples)."""

    source: str                     # "clef-prof sampler", "nsys python sampling" or "kineto python_function"
    samples: int                    # samples used (in the session, readable thread)
    threads: int                    # threads sampled
    asked_hz: float | None
    observed_hz: float | None       # from the median gap between a thread's consecutive samples
    ms_per_sample: float | None
    requests: int | None
    confidence: float               # of every share interval (Wilson score)
    unknown_stack: int              # samples whose stack has no definition (in "(unknown stack)")
    unreadable: int                 # marks of the domain that name no thread: left out
    outside_session: int            # samples before the session or after its end: left out
    cut_stacks: int                 # samples whose stack was cut at 128 frames
    bad_definitions: int            # sampler strings that could not be read
    stages: dict[str, SampleFigures]
    unit: str = "samples"           # "ns" from a Kineto trace: the counts are self ns of python_function events
    placed_by_time: int = 0         # nsys' samples of a Python thread tied to no OS thread, placed by time only
    unplaced: int = 0               # nsys' samples left out: several untied threads had a range open then
    own_samples: int = 0            # samples of clef-prof's own threads (its clock thread): left out
    duplicates: int = 0             # sample marks or python_function events repeating another exactly: counted once

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "stages"}
        out["stages"] = {k: v.to_json() for k, v in self.stages.items()}
        return out


@dataclass
class Result:
    """Everything analyze found in one capture (docs/json.md, "analyze")."""

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
    journey: Journey | None = None      # per-request journeys, when the capture holds request ranges
    samples: Samples | None = None      # Python functions per stage, when the capture holds clef-prof samples

    def to_json(self) -> dict:
        """The JSON contract as a dict (`json.dumps` of it is `clef-prof analyze -f json`)."""
        cfg = self.config
        out = {"schema": self.schema, "path": self.path, "requests": self.requests,
               "requests_source": self.requests_source, "batches": self.batches,
               "config": {"domain": cfg.domain, "batch": cfg.batch, "stages": list(cfg.stages), "source": cfg.source},
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
        if self.journey is not None:
            out["journey"] = self.journey.to_json()
        if self.samples is not None:
            out["samples"] = self.samples.to_json()
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
