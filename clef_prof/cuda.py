"""CUDA API calls and the GPU work they caused, paired on (process, correlationId).

API names carry ABI suffixes (`cudaLaunchKernel_v7000`, `_ptsz`); they are classified once
per distinct name, then rows are selected in SQL by nameId.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .capture import Export

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

# API call kinds
LAUNCH, GRAPH, COPY, SET, SYNC = 1, 2, 3, 4, 5
KIND_NAMES = {LAUNCH: "kernel launch", GRAPH: "graph launch", COPY: "memcpy", SET: "memset", SYNC: "sync"}

_LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
           "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
           "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice", "cuLaunchGrid",
           "cuLaunchGridAsync"}
_GRAPH = {"cudaGraphLaunch", "cuGraphLaunch"}
_SYNC = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
         "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
_SUFFIX = re.compile(r"(_v\d+)?(_pt(sz|ds))?$")

# ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND (identical 2022.4 .. 2026.2; carried because
# the ENUM tables can be empty)
HTOD, DTOH = 1, 2
PAGEABLE, PINNED = 0, 1


def api_kind(name: str) -> int:
    base = _SUFFIX.sub("", name)
    if base in _LAUNCH:
        return LAUNCH
    if base in _GRAPH:
        return GRAPH
    if base.startswith(("cudaMemcpy", "cuMemcpy")):
        return COPY
    if base.startswith(("cudaMemset", "cuMemset")):
        return SET
    if base in _SYNC:
        return SYNC
    return 0


def cuda_traced(cap: Export) -> bool:
    """True when the capture traced CUDA (the RUNTIME table, or the capture settings, say so)."""
    if cap.has(RUNTIME):
        return True
    return bool(cap.capture_flag("COLLECT_CUDA_TRACE")) and cap.has(KERNEL)


def graph_trace_mode(cap: Export) -> str | None:
    """'graph' or 'node' as recorded (or inferred), None without CUDA trace."""
    if not cuda_traced(cap):
        return None
    for key, vals in cap.capture_meta.items():
        if key.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE") and vals:
            return str(vals[0]).lower()
    if cap.has(GRAPH_TRACE):
        return "graph"
    if "graphNodeId" in cap.columns(KERNEL) and cap.count(KERNEL, "WHERE graphNodeId IS NOT NULL AND graphNodeId != 0"):
        return "node"
    return "unknown"


@dataclass
class Calls:
    """API calls of interest: launches, graph launches, memcpy, memset, syncs."""

    start: np.ndarray
    end: np.ndarray
    gtid: np.ndarray
    corr: np.ndarray
    kind: np.ndarray
    last_end: int | None       # end of the last CUDA API row of any kind


def read_calls(cap: Export) -> Calls:
    kinds = {i: api_kind(v) for i, v in cap.strings.items()}
    ids = {k: [i for i, kd in kinds.items() if kd == k] for k in KIND_NAMES}
    wanted = [i for lst in ids.values() for i in lst]
    id_list = ",".join(str(i) for i in wanted) or "NULL"
    r = cap.read(f'SELECT start, "end", globalTid, COALESCE(correlationId, 0), nameId FROM {RUNTIME} '
                 f"WHERE nameId IN ({id_list})", ["start", "end", "gtid", "corr", "nameId"])
    lut_keys = np.array(sorted(kinds), dtype=np.int64)
    lut_vals = np.array([kinds[k] for k in lut_keys], dtype=np.int8)
    kind = lut_vals[np.searchsorted(lut_keys, r["nameId"])] if len(r["nameId"]) else np.zeros(0, np.int8)
    last = cap.rows(f'SELECT max("end") FROM {RUNTIME}')[0][0]
    return Calls(r["start"], r["end"], r["gtid"], r["corr"], kind, None if last is None else int(last))


def _gpu(cap: Export, table: str, extra: list[tuple[str, str, int]]) -> pd.DataFrame:
    """start, end, gpid, corr, device and `extra` (name, column, default) of one GPU table."""
    cols = cap.columns(table)
    spec = [("start", "start", 0), ("end", "end", 0), ("gpid", "globalPid", 0),
            ("corr", "correlationId", 0), ("device", "deviceId", 0), *extra]
    if not cols:
        return pd.DataFrame({n: np.zeros(0, np.int64) for n, _, _ in spec})
    exprs = [f'COALESCE("{c}", {d})' if c in cols else str(d) for _, c, d in spec]
    return pd.DataFrame(cap.read(f"SELECT {', '.join(exprs)} FROM {table}", [n for n, _, _ in spec]))


def read_kernels(cap: Export) -> pd.DataFrame:
    return _gpu(cap, KERNEL, [])


def read_memcpy(cap: Export) -> pd.DataFrame:
    return _gpu(cap, MEMCPY, [("bytes", "bytes", 0), ("copyKind", "copyKind", 0), ("srcKind", "srcKind", 7),
                              ("dstKind", "dstKind", 7), ("copies", "copyCount", 1)])


def read_memset(cap: Export) -> pd.DataFrame:
    return _gpu(cap, MEMSET, [])


def read_graph_trace(cap: Export) -> pd.DataFrame:
    return _gpu(cap, GRAPH_TRACE, [])


def process_key(global_id: np.ndarray) -> np.ndarray:
    """The process part of a globalTid/globalPid (hardware, VM and PID bits)."""
    return np.asarray(global_id, dtype=np.int64) >> 24


def pair(gpu: pd.DataFrame, calls: Calls) -> np.ndarray:
    """For each GPU row, the index of its launching API call (-1 when none was recorded)."""
    if len(gpu) == 0:
        return np.zeros(0, dtype=np.int64)
    no_pid = (gpu["gpid"].to_numpy() == 0).all()
    api = pd.DataFrame({"pk": 0 if no_pid else process_key(calls.gtid), "corr": calls.corr,
                        "call": np.arange(len(calls.corr))})
    api = api.drop_duplicates(["pk", "corr"])
    g = pd.DataFrame({"pk": 0 if no_pid else process_key(gpu["gpid"].to_numpy()), "corr": gpu["corr"].to_numpy()})
    m = g.merge(api, on=["pk", "corr"], how="left", sort=False)
    return m["call"].fillna(-1).to_numpy(dtype=np.int64)
