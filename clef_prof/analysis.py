"""`analyze`: one capture in, per-request stage metrics and validation warnings out.

Reading happens in `capture`/`nvtx`/`cuda`; this module wires the steps together and
assembles the JSON contract documented in the README.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from . import cuda as cu
from .attribute import place, slots
from .capture import Export
from .errors import CaptureError
from .metrics import NS_PER_MS, cuda_counts, host_stats, per_batch, per_batch_durations, safe_div
from .nvtx import census
from .overlap import busy_union, covered_by
from .stage import StageConfig, Stages, build
from . import validate

SCHEMA = "clef-prof/analyze/1"
CUDA_STAGE_KEYS = ("h2d_copies", "h2d_bytes", "h2d_pageable", "h2d_pinned", "d2h_copies", "d2h_bytes",
                   "kernel_launches", "graph_launches", "graph_kernels", "gpu_kernels", "graph_executions",
                   "memcpy_calls", "memset_calls", "sync_calls")


@dataclass
class Analysis:
    """Everything `analyze` found: the JSON-ready `result` and the frames behind it."""

    path: str
    config: StageConfig
    result: dict
    stages: Stages
    calls: pd.DataFrame = field(repr=False)
    transfers: pd.DataFrame = field(repr=False)
    kernels: pd.DataFrame = field(repr=False)
    gpu_busy: pd.DataFrame = field(repr=False)
    per_batch: pd.DataFrame = field(repr=False, default=None)

    @property
    def warnings(self) -> list[str]:
        return self.result["warnings"]


def analyze(path: str, config: StageConfig = StageConfig(), requests: int | None = None,
            on_step: Callable[[str], None] | None = None) -> Analysis:
    step = on_step or (lambda _s: None)
    with Export.open(path) as cap:
        step("schema")
        if not cap.has("NVTX_EVENTS"):
            if not cap.tables:
                raise CaptureError(f"{path}: an empty SQLite database, not an nsys export")
            if not (cap.export_meta or cap.has("StringIds")):
                raise CaptureError(f"{path}: not an Nsight Systems export (no NVTX_EVENTS, StringIds or export metadata)")
            raise CaptureError(f"{path}: the export has no NVTX_EVENTS table: record with `nsys profile -t nvtx,...` "
                               "and annotate the stages (see `clef-prof doctor`)")
        return _analyze(cap, config, requests, step)


def _analyze(cap: Export, config: StageConfig, requests: int | None, step) -> Analysis:
    warnings: list[str] = []
    step("nvtx")
    nv = census(cap)
    stages = build(cap, config, requests)
    warnings += validate.nvtx_presence(cap, nv, stages)

    traced = cu.cuda_traced(cap)
    mode = cu.graph_trace_mode(cap)
    n_slots = len(config.stages) + 2
    empty = pd.DataFrame()
    calls_df, transfers, kernels, busy_df = empty, empty, empty, empty
    counts = None
    if traced:
        step("cuda api")
        calls = cu.read_calls(cap)
        stages, w = validate.lost_tail(stages, calls.last_end)
        warnings += w
        step("attribute")
        c_slot, c_batch = place(stages, calls.gtid, calls.start, calls.end)
        calls_df = pd.DataFrame({"start": calls.start, "end": calls.end, "gtid": calls.gtid, "corr": calls.corr,
                                 "kind": calls.kind, "slot": c_slot, "batch": c_batch})
        step("gpu activity")
        memcpy = cu.read_memcpy(cap)
        kern = cu.read_kernels(cap)
        memset = cu.read_memset(cap)
        graphs = cu.read_graph_trace(cap)
        step("pair")
        outside = n_slots - 1

        def link(df):
            call = cu.pair(df, calls)
            df["call"] = call
            df["slot"] = np.where(call >= 0, c_slot[np.maximum(call, 0)], outside)
            df["batch"] = np.where(call >= 0, c_batch[np.maximum(call, 0)], -1)
            df["api_kind"] = np.where(call >= 0, calls.kind[np.maximum(call, 0)], 0)
            return df

        transfers, kernels, graphs = link(memcpy), link(kern), link(graphs)
        kernels["from_graph"] = kernels["api_kind"].to_numpy() == cu.GRAPH
        counts = cuda_counts(
            n_slots, calls.kind, c_slot,
            transfers["slot"].to_numpy(), transfers["copyKind"].to_numpy(), transfers["srcKind"].to_numpy(),
            transfers["dstKind"].to_numpy(), transfers["copies"].to_numpy(), transfers["bytes"].to_numpy(),
            kernels["slot"].to_numpy(), kernels["from_graph"].to_numpy(), graphs["slot"].to_numpy())
        parts = [d[["gpid", "start", "end", "slot", "batch"]].assign(kind=k) for d, k in
                 ((kern, "kernel"), (memcpy, "memcpy"), (memset if len(memset) else None, "memset"), (graphs, "graph"))
                 if d is not None and len(d)]
        busy_df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            {c: np.zeros(0, np.int64) for c in ("gpid", "start", "end", "slot", "batch")})
        warnings += validate.unpaired(calls_df, transfers, kernels, mode)
    else:
        warnings.append(validate.NO_CUDA)

    step("metrics")
    warnings += validate.stage_layout(cap, stages)
    cov = None
    if traced:
        busy = busy_union(busy_df["gpid"].to_numpy() >> 24, busy_df["start"].to_numpy(), busy_df["end"].to_numpy())
        b = stages.batches
        cov = covered_by(busy, b["gtid"].to_numpy() >> 24, b["start"].to_numpy(), b["end"].to_numpy())
    table = per_batch(stages, calls_df if traced else None, transfers if traced else None, cov)
    result = _result(cap, stages, counts, busy_df, cov, traced, mode, warnings)
    return Analysis(cap.path, config, result, stages, calls_df, transfers, kernels, busy_df, table)


def _result(cap: Export, stages: Stages, counts, busy_df: pd.DataFrame, cov, traced: bool, mode,
            warnings: list[str]) -> dict:
    cfg = stages.config
    req = stages.requests
    inst = stages.instances
    names = slots(stages)
    n_st = len(cfg.stages)
    graph_kernels_known = traced and mode in ("node", "unknown") and counts is not None and (
        mode == "node" or counts["graph_kernels"].sum() > 0)

    def cuda_block(idx: list[int]) -> dict:
        if counts is None:
            return {k: None for k in CUDA_STAGE_KEYS}
        out = {k: int(counts[k][idx].sum()) for k in CUDA_STAGE_KEYS}
        if not graph_kernels_known:
            out["graph_kernels"] = None
        if mode != "graph" or not cap.has(cu.GRAPH_TRACE):
            out["graph_executions"] = None
        return out

    def per_req(block: dict) -> dict:
        return {f"{k}_per_request": safe_div(block[k], req) for k in
                ("h2d_copies", "h2d_bytes", "d2h_copies", "kernel_launches", "graph_launches")}

    stage_out = {}
    for code, name in enumerate(cfg.stages):
        sub = inst[inst["stage"] == name]
        total_ns = int((sub["end"] - sub["start"]).sum())
        block = {"instances": int(len(sub)), "host_ns_total": total_ns, "host_ms_total": total_ns / NS_PER_MS,
                 "host_ms_per_request": safe_div(total_ns / NS_PER_MS, req),
                 **host_stats(per_batch_durations(inst, name)), **cuda_block([code])}
        block.update(per_req(block))
        stage_out[name] = block

    b = stages.batches
    bdur = (b["end"] - b["start"]).to_numpy()
    pooler = {"name": cfg.batch, "instances": int(len(b)), "host_ns_total": int(bdur.sum()),
              "host_ms_total": float(bdur.sum() / NS_PER_MS),
              "host_ms_per_request": safe_div(float(bdur.sum() / NS_PER_MS), req), **host_stats(bdur),
              **cuda_block(list(range(n_st + 1)))}
    pooler.update(per_req(pooler))
    outside = cuda_block([n_st + 1])
    outside_batch = cuda_block([n_st])
    totals = cuda_block(list(range(n_st + 2)))

    # overlap: GPU busy (any work of the same process) during each batch's host span
    overlap = {"gpu_busy_fraction_of_pooler_span": None, "gpu_busy_fraction_p50": None,
               "gpu_busy_ms_in_pooler_span_per_request": None, "gpu_busy_ms_per_request": None}
    if traced and len(b):
        gpk = busy_df["gpid"].to_numpy() >> 24
        frac = cov / np.maximum(bdur, 1)
        staged = busy_df["slot"].to_numpy() < n_st + 1
        own = busy_union(gpk[staged], busy_df["start"].to_numpy()[staged], busy_df["end"].to_numpy()[staged])
        own_ns = sum(int((me - ms).sum()) for ms, me in own.values())
        overlap = {"gpu_busy_fraction_of_pooler_span": float(cov.sum() / max(bdur.sum(), 1)),
                   "gpu_busy_fraction_p50": float(np.percentile(frac, 50)),
                   "gpu_busy_ms_in_pooler_span_per_request": safe_div(float(cov.sum()) / NS_PER_MS, req),
                   "gpu_busy_ms_per_request": safe_div(own_ns / NS_PER_MS, req)}

    per_request = {
        "h2d_copies": safe_div(pooler["h2d_copies"], req), "h2d_bytes": safe_div(pooler["h2d_bytes"], req),
        "d2h_copies": safe_div(pooler["d2h_copies"], req),
        "kernel_launches": safe_div(pooler["kernel_launches"], req),
        "graph_launches": safe_div(pooler["graph_launches"], req),
        "pooler_host_ms": safe_div(pooler["host_ms_total"], req) if len(b) else safe_div(
            sum(s["host_ms_total"] for s in stage_out.values()), req),
        "gpu_busy_ms": overlap["gpu_busy_ms_per_request"],
    }
    return {
        "schema": SCHEMA,
        "path": cap.path,
        "requests": req,
        "requests_source": stages.requests_source if req is not None else None,
        "batches": int(len(b)),
        "config": {"domain": cfg.domain, "batch": cfg.batch, "stages": list(cfg.stages)},
        "capture": _capture_facts(cap, stages, traced, mode),
        "stages": stage_out,
        "pooler": pooler,
        "outside_stages": {"in_batch": outside_batch, "outside_batch": outside},
        "totals": totals,
        "per_request": per_request,
        "overlap": overlap,
        "excluded": {"cut_at_edges": dict(stages.cut), "outside_batch_instances": stages.outside_batch},
        "warnings": warnings,
        "slots": names,
    }


def _capture_facts(cap: Export, stages: Stages, traced: bool, mode) -> dict:
    inst, b = stages.instances, stages.batches
    starts = np.concatenate([inst["start"].to_numpy(), b["start"].to_numpy()])
    ends = np.concatenate([inst["end"].to_numpy(), b["end"].to_numpy()])
    gtids = np.unique(np.concatenate([inst["gtid"].to_numpy(), b["gtid"].to_numpy()]))
    return {
        "nsys_version": cap.nsys_version,
        "schema_version": cap.schema_version,
        "duration_s": None if cap.duration_ns is None else cap.duration_ns / 1e9,
        "stage_window_s": [float(starts.min() / 1e9), float(ends.max() / 1e9)] if len(starts) else None,
        "cuda_traced": traced,
        "graph_trace_mode": mode,
        "threads": validate.thread_facts(cap, stages, gtids),
    }
