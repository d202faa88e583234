"""Per-stage metrics as pure functions over arrays: host time and CUDA work per slot."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .cuda import COPY, DTOH, GRAPH, HTOD, LAUNCH, PAGEABLE, PINNED, SET, SYNC

NS_PER_MS = 1e6


def host_stats(durations_ns: np.ndarray) -> dict[str, float | None]:
    """mean, p50 and p99 in ms of per-instance durations (None when there are none)."""
    if len(durations_ns) == 0:
        return {"host_ms_mean": None, "host_ms_p50": None, "host_ms_p99": None}
    d = np.asarray(durations_ns, dtype=np.float64) / NS_PER_MS
    return {"host_ms_mean": float(d.mean()), "host_ms_p50": float(np.percentile(d, 50)),
            "host_ms_p99": float(np.percentile(d, 99))}


def per_batch_durations(instances: pd.DataFrame, stage: str) -> np.ndarray:
    """A stage's host time per batch (instances in one batch summed); free instances alone."""
    sub = instances[instances["stage"] == stage]
    dur = (sub["end"] - sub["start"]).to_numpy()
    b = sub["batch"].to_numpy()
    inside = b >= 0
    summed = pd.Series(dur[inside]).groupby(b[inside]).sum().to_numpy() if inside.any() else np.zeros(0, np.int64)
    return np.concatenate([summed, dur[~inside]])


def cuda_counts(n_slots: int, call_kind: np.ndarray, call_slot: np.ndarray,
                copy_slot: np.ndarray, copy_kind: np.ndarray, copy_src: np.ndarray, copy_dst: np.ndarray,
                copy_n: np.ndarray, copy_bytes: np.ndarray,
                kernel_slot: np.ndarray, kernel_from_graph: np.ndarray,
                graph_rows_slot: np.ndarray) -> dict[str, np.ndarray]:
    """Counts per slot. Copies count `copyCount` logical copies per row."""
    def cnt(slot, weights=None):
        return np.bincount(slot, weights=weights, minlength=n_slots)[:n_slots].astype(np.int64)

    h2d = copy_kind == HTOD
    d2h = copy_kind == DTOH
    return {
        "h2d_copies": cnt(copy_slot[h2d], copy_n[h2d]),
        "h2d_bytes": cnt(copy_slot[h2d], copy_bytes[h2d]),
        "h2d_pageable": cnt(copy_slot[h2d & (copy_src == PAGEABLE)], copy_n[h2d & (copy_src == PAGEABLE)]),
        "h2d_pinned": cnt(copy_slot[h2d & (copy_src == PINNED)], copy_n[h2d & (copy_src == PINNED)]),
        "d2h_copies": cnt(copy_slot[d2h], copy_n[d2h]),
        "d2h_bytes": cnt(copy_slot[d2h], copy_bytes[d2h]),
        "d2h_pageable": cnt(copy_slot[d2h & (copy_dst == PAGEABLE)], copy_n[d2h & (copy_dst == PAGEABLE)]),
        "d2h_pinned": cnt(copy_slot[d2h & (copy_dst == PINNED)], copy_n[d2h & (copy_dst == PINNED)]),
        "memcpy_calls": cnt(call_slot[call_kind == COPY]),
        "kernel_launches": cnt(call_slot[call_kind == LAUNCH]),
        "graph_launches": cnt(call_slot[call_kind == GRAPH]),
        "memset_calls": cnt(call_slot[call_kind == SET]),
        "sync_calls": cnt(call_slot[call_kind == SYNC]),
        "gpu_kernels": cnt(kernel_slot),
        "graph_kernels": cnt(kernel_slot[kernel_from_graph]),
        "graph_executions": cnt(graph_rows_slot),
    }


def safe_div(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


def per_batch(stages, calls: pd.DataFrame | None, transfers: pd.DataFrame | None,
              gpu_covered_ns: np.ndarray | None) -> pd.DataFrame:
    """One row per batch: size, host ns of the batch and of each stage, the CUDA work launched
    inside it, and the ns of its host span during which the GPU was busy.

    This is the unit that `compare` resamples; CUDA columns are absent without CUDA trace.
    """
    b = stages.batches
    n = len(b)
    out = pd.DataFrame({"start": b["start"].to_numpy(), "end": b["end"].to_numpy(), "gtid": b["gtid"].to_numpy(),
                        "size": b["size"].to_numpy(), "host_ns": (b["end"] - b["start"]).to_numpy()})
    inst = stages.instances
    inside = inst[inst["batch"] >= 0]
    dur = (inside["end"] - inside["start"]).to_numpy()
    codes = inside["stage"].cat.codes.to_numpy()
    for code, name in enumerate(stages.config.stages):
        m = codes == code
        out[f"{name}_ns"] = np.bincount(inside["batch"].to_numpy()[m], weights=dur[m], minlength=n)[:n].astype(np.int64)
    if calls is not None:
        in_b = calls["batch"].to_numpy() >= 0
        kind = calls["kind"].to_numpy()
        cb = calls["batch"].to_numpy()
        out["kernel_launches"] = np.bincount(cb[in_b & (kind == LAUNCH)], minlength=n)[:n]
        out["graph_launches"] = np.bincount(cb[in_b & (kind == GRAPH)], minlength=n)[:n]
        tb = transfers["batch"].to_numpy()
        ck = transfers["copyKind"].to_numpy()
        cn = transfers["copies"].to_numpy()
        by = transfers["bytes"].to_numpy()
        for label, kd in (("h2d", HTOD), ("d2h", DTOH)):
            m = (tb >= 0) & (ck == kd)
            out[f"{label}_copies"] = np.bincount(tb[m], weights=cn[m], minlength=n)[:n].astype(np.int64)
            out[f"{label}_bytes"] = np.bincount(tb[m], weights=by[m], minlength=n)[:n].astype(np.int64)
        out["gpu_busy_ns"] = gpu_covered_ns if gpu_covered_ns is not None else 0
    return out
