"""The typed result of one capture (`model.Result`) from its stages, CUDA counts and GPU coverage:
per stage, the batch range, overlap, per request, ranks and capture facts; findings not yet judged."""
from __future__ import annotations

from dataclasses import asdict, fields

import numpy as np

from .figures import cuda as cu
from .figures.arrays import percentile, unique
from .figures.attribute import slots
from .figures.metrics import NS_PER_MS, host_stats, per_batch_durations, safe_div
from .figures.overlap import span_union
from .figures.stages import Stages
from .judge import findings, validate
from .model import (BatchFigures, CaptureFacts, CudaCounts, CudaPerRequest, Excluded, OutsideStages, Overlap,
                    PerRequest, RankFigures, Result, StageFigures)
from .read import kineto
from .read.columns import Table
from .read.export import Export

CUDA_STAGE_KEYS = tuple(f.name for f in fields(CudaCounts))


def result(cap: Export, stages: Stages, counts, own_ns: int | None, cov, traced: bool, mode,
            warnings: list[str], table: Table, lost, unions: Table | None = None) -> Result:
    """The typed result, findings not yet judged (they read it). `unions`: the union of the batch
    spans of each process, with the GPU busy ns in each interval (None without CUDA trace)."""
    cfg = stages.config
    req = stages.requests
    inst = stages.instances
    names = slots(stages)
    n_st = len(cfg.stages)
    graph_kernels_known = traced and mode in ("node", "unknown") and counts is not None and (
        mode == "node" or counts["graph_kernels"].sum() > 0)

    def cuda_counts(idx: list[int]) -> CudaCounts:
        if counts is None:
            return CudaCounts()
        out = CudaCounts(**{k: int(counts[k][idx].sum()) for k in CUDA_STAGE_KEYS})
        if not graph_kernels_known:
            out.graph_kernels = None
        if mode != "graph" or not cap.has(cu.GRAPH_TRACE):
            out.graph_executions = None
        return out

    host_ns = np.asarray(table["host_ns"])
    stage_out = {}
    for code, name in enumerate(cfg.stages):
        sub = inst[inst["code"] == code]
        total_ns = int((sub["end"] - sub["start"]).sum())
        loose = sub[sub["batch"] < 0]
        loose_ms = float((loose["end"] - loose["start"]).sum()) / NS_PER_MS
        cuda = cuda_counts([code])
        stage_out[name] = StageFigures(
            instances=int(len(sub)), host_ns_total=total_ns, host_ms_total=total_ns / NS_PER_MS,
            host_ms_per_request=safe_div(total_ns / NS_PER_MS, req), **host_stats(per_batch_durations(inst, code)),
            cuda=cuda, cuda_per_request=_per_request(cuda, req), outside_batch_instances=int(len(loose)),
            outside_batch_host_ms_per_request=safe_div(loose_ms, req),
            share=findings.stage_shares(np.asarray(table[f"{name}_ns"]), host_ns))

    b = stages.batches
    bdur = b["end"] - b["start"]
    _, us, ue = span_union(b["gtid"] >> 24, b["start"], b["end"])
    union_ns = int((ue - us).sum())
    cuda = cuda_counts(list(range(n_st + 1)))
    pooler = BatchFigures(
        name=cfg.batch, instances=int(len(b)), host_ns_total=int(bdur.sum()),
        host_ms_total=float(bdur.sum() / NS_PER_MS), host_ms_per_request=safe_div(float(bdur.sum() / NS_PER_MS), req),
        **host_stats(bdur), cuda=cuda, cuda_per_request=_per_request(cuda, req),
        span_union_ms_total=union_ns / NS_PER_MS)

    # overlap: GPU busy (any work of the same process) during the batch spans: per capture within
    # their union (time under two batches in flight counts once), per batch within its own span
    overlap = Overlap()
    if traced and len(b):
        frac = cov / np.maximum(bdur, 1)
        counted = np.isin(unions["pk"], unique(b["gtid"] >> 24))
        in_union = int(unions["gpu_busy_ns"][counted].sum())
        overlap = Overlap(gpu_busy_fraction_of_pooler_span=in_union / max(union_ns, 1),
                          gpu_busy_fraction_p50=percentile(frac, 50),
                          gpu_busy_ms_in_pooler_span_per_request=safe_div(in_union / NS_PER_MS, req),
                          gpu_busy_ms_per_request=safe_div(own_ns / NS_PER_MS, req),
                          gpu_busy_fraction_of_batch_spans=float(cov.sum() / max(bdur.sum(), 1)),
                          gpu_busy_ms_in_batch_spans_per_request=safe_div(float(cov.sum()) / NS_PER_MS, req))

    per_request = PerRequest(
        **asdict(pooler.cuda_per_request),
        pooler_host_ms=safe_div(pooler.host_ms_total, req) if len(b) else safe_div(
            sum(s.host_ms_total for s in stage_out.values()), req),
        gpu_busy_ms=overlap.gpu_busy_ms_per_request)
    return Result(
        path=cap.path, requests=req, requests_source=stages.requests_source if req is not None else None,
        batches=int(len(b)), config=cfg, capture=_capture_facts(cap, stages, traced, mode), stages=stage_out,
        pooler=pooler,
        outside_stages=OutsideStages(in_batch=cuda_counts([n_st]), outside_batch=cuda_counts([n_st + 1])),
        totals=cuda_counts(list(range(n_st + 2))), per_request=per_request, overlap=overlap,
        excluded=Excluded(cut_at_edges=dict(stages.cut), outside_batch_instances=stages.outside_batch,
                          nested_batch_ranges=stages.nested),
        ranks=_ranks(stages, cov if traced else None, unions), warnings=warnings, slots=names, lost_records=lost)


def _per_request(c: CudaCounts, req: int | None) -> CudaPerRequest:
    return CudaPerRequest(h2d_copies=safe_div(c.h2d_copies, req), h2d_bytes=safe_div(c.h2d_bytes, req),
                          d2h_copies=safe_div(c.d2h_copies, req), kernel_launches=safe_div(c.kernel_launches, req),
                          graph_launches=safe_div(c.graph_launches, req))


def _ranks(stages: Stages, cov, unions: Table | None = None) -> list[RankFigures]:
    """Per process holding batches: its first rank (replicas share one), whether its batches are the
    ones counted, and its own batches, requests, host ms per request and GPU overlap (GPU busy
    within the union of its batch spans, as a fraction of that union)."""
    cols = ("start", "end", "gtid", "size", "gpu_busy_ns", "counted")
    parts = [stages.batches.assign(gpu_busy_ns=cov if cov is not None else 0, counted=True).select(cols)]
    if stages.replicas is not None:
        reps = stages.replicas
        parts.append(reps.assign(counted=False, **({} if "gpu_busy_ns" in reps else {"gpu_busy_ns": 0})).select(cols))
    b = Table.concat(parts)
    if len(b) == 0:
        return []
    pks = b["gtid"] >> 24
    out = []
    for pk in unique(pks):       # once per process holding batches
        g = b[pks == pk]
        dur = int((g["end"] - g["start"]).sum())
        req = int(g["size"].sum())
        frac = None
        if cov is not None:
            u = unions[unions["pk"] == pk]
            frac = float(u["gpu_busy_ns"].sum()) / max(int((u["end"] - u["start"]).sum()), 1)
        out.append(RankFigures(pid=int(pk) & 0xFFFFFF, first_rank_pid=int(stages.rank_lead.get(int(pk), pk)) & 0xFFFFFF,
                               counted=bool(g["counted"][0]), batches=int(len(g)), requests=req,
                               host_ms_per_request=safe_div(dur / NS_PER_MS, req), gpu_busy_fraction_of_pooler_span=frac))
    return out


def _capture_facts(cap: Export, stages: Stages, traced: bool, mode) -> CaptureFacts:
    inst, b = stages.instances, stages.batches
    starts = np.concatenate([inst["start"], b["start"]])
    ends = np.concatenate([inst["end"], b["end"]])
    gtids = unique(np.concatenate([inst["gtid"], b["gtid"]]))
    return CaptureFacts(
        nsys_version=cap.nsys_version, cuda_driver_version=cap.cuda_driver_version,
        schema_version=cap.schema_version, duration_s=None if cap.duration_ns is None else cap.duration_ns / 1e9,
        stage_window_s=(float(starts.min() / 1e9), float(ends.max() / 1e9)) if len(starts) else None,
        cuda_traced=traced, graph_trace_mode=mode, threads=validate.thread_facts(cap, stages, gtids),
        source=kineto.source_facts(cap))
