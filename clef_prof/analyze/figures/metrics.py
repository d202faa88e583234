"""Per-stage metrics as pure functions over arrays: host time and CUDA work per slot."""
from __future__ import annotations

import numpy as np

from .arrays import percentile
from ...base.errors import SpecError
from ..read.columns import Table
from .cuda import COPY, DEVICE_SYNC, DTOH, GRAPH, HTOD, LAUNCH, PAGEABLE, PINNED, SET, SYNC, SYNC_COPY

NS_PER_MS = 1e6


def host_stats(durations_ns: np.ndarray) -> dict[str, float | None]:
    """mean, p50 and p99 in ms of per-instance durations (None when there are none)."""
    if len(durations_ns) == 0:
        return {"host_ms_mean": None, "host_ms_p50": None, "host_ms_p99": None}
    d = np.asarray(durations_ns, dtype=np.float64) / NS_PER_MS
    return {"host_ms_mean": float(d.mean()), "host_ms_p50": percentile(d, 50),
            "host_ms_p99": percentile(d, 99)}


def per_batch_durations(instances: Table, code: int) -> np.ndarray:
    """Stage `code`'s host time per batch (instances in one batch summed, in batch order); free
    instances alone."""
    sub = instances[instances["code"] == code]
    dur = sub["end"] - sub["start"]
    b = sub["batch"]
    inside = b >= 0
    _, inv = np.unique(b[inside], return_inverse=True)
    summed = np.zeros(inv.max() + 1 if len(inv) else 0, np.int64)
    np.add.at(summed, inv.reshape(-1), dur[inside])
    return np.concatenate([summed, dur[~inside]])


COPY_KEYS = ("h2d_copies", "h2d_bytes", "h2d_pageable", "h2d_pinned",
             "d2h_copies", "d2h_bytes", "d2h_pageable", "d2h_pinned")
CALL_KEYS = {COPY: "memcpy_calls", LAUNCH: "kernel_launches", GRAPH: "graph_launches", SET: "memset_calls",
             SYNC: "sync_calls"}
SYNC_KEYS = {DEVICE_SYNC: "device_syncs", SYNC_COPY: "sync_memcpy_calls"}
BATCH_KEYS = ("kernel_launches", "graph_launches", "h2d_copies", "h2d_bytes", "d2h_copies", "d2h_bytes")


class CudaTally:
    """Per-slot and per-batch CUDA counts, accumulated chunk by chunk (int64 throughout)."""

    def __init__(self, n_slots: int, n_batches: int):
        self.n_slots, self.n_batches = n_slots, n_batches
        self.slot = {k: np.zeros(n_slots, np.int64) for k in (*COPY_KEYS, *CALL_KEYS.values(), *SYNC_KEYS.values(),
                                                              "gpu_kernels", "graph_kernels", "graph_executions")}
        # per batch: each count per slot (n_batches x n_slots), and the busy ns of the batch's own
        # GPU work (the union of the GPU intervals launched inside it; set by the GPU pass)
        self.batch = {k: np.zeros((n_batches, n_slots), np.int64) for k in BATCH_KEYS}
        self.batch["gpu_own_ns"] = np.zeros(n_batches, np.int64)

    @staticmethod
    def _cnt(idx: np.ndarray, n: int, weights=None) -> np.ndarray:
        if len(idx) == 0:
            return np.zeros(n, np.int64)
        out = np.bincount(idx, weights=weights, minlength=n)[:n]
        # float sums of int64 weights are exact per chunk (below 2**53)
        return out.astype(np.int64) if weights is not None else out

    def add_calls(self, kind: np.ndarray, slot: np.ndarray, batch: np.ndarray | None) -> None:
        n = self.n_slots
        by_kind = np.bincount(kind.astype(np.int64) * n + slot, minlength=(max(CALL_KEYS) + 1) * n)
        for kd, key in CALL_KEYS.items():
            self.slot[key] += by_kind[kd * n:(kd + 1) * n]
        if batch is not None and self.n_batches:
            inb = batch >= 0
            for kd, key in ((LAUNCH, "kernel_launches"), (GRAPH, "graph_launches")):
                m = inb & (kind == kd)
                self._add_batch(key, batch[m], slot[m])

    def _add_batch(self, key: str, batch: np.ndarray, slot: np.ndarray, weights=None) -> None:
        """Count per (batch, slot): one bincount over the cells between the chunk's first and last
        batch (a window of the capture touches few batches)."""
        if len(batch) == 0:
            return
        cell = batch.astype(np.int64) * self.n_slots + slot
        lo, hi = int(cell.min()), int(cell.max()) + 1
        self.batch[key].reshape(-1)[lo:hi] += self._cnt(cell - lo, hi - lo, weights)

    def add_syncs(self, sync: np.ndarray, slot: np.ndarray) -> None:
        """Device syncs and synchronous memcpy calls per slot (`cuda.sync_kind` of each call)."""
        for kd, key in SYNC_KEYS.items():
            self.slot[key] += self._cnt(slot[sync == kd], self.n_slots)

    def add_copies(self, slot, batch, copy_kind, src, dst, n, nbytes) -> None:
        ns = self.n_slots
        for label, kd, mem in (("h2d", HTOD, src), ("d2h", DTOH, dst)):
            m = copy_kind == kd
            if not m.any():
                continue
            sl, cn, by = slot[m], n[m], nbytes[m]
            self.slot[f"{label}_copies"] += self._cnt(sl, ns, cn)
            self.slot[f"{label}_bytes"] += self._cnt(sl, ns, by)
            mm = mem[m]
            for kind_label, mk in (("pageable", PAGEABLE), ("pinned", PINNED)):
                k = mm == mk
                self.slot[f"{label}_{kind_label}"] += self._cnt(sl[k], ns, cn[k])
            if batch is not None and self.n_batches:
                b = batch[m]
                inb = b >= 0
                self._add_batch(f"{label}_copies", b[inb], sl[inb], cn[inb])
                self._add_batch(f"{label}_bytes", b[inb], sl[inb], by[inb])

    def add_kernels(self, slot: np.ndarray, from_graph: np.ndarray) -> None:
        self.slot["gpu_kernels"] += self._cnt(slot, self.n_slots)
        self.slot["graph_kernels"] += self._cnt(slot[from_graph], self.n_slots)

    def add_graph_rows(self, slot: np.ndarray) -> None:
        self.slot["graph_executions"] += self._cnt(slot, self.n_slots)

    def counts(self) -> dict[str, np.ndarray]:
        keys = ("h2d_copies", "h2d_bytes", "h2d_pageable", "h2d_pinned", "d2h_copies", "d2h_bytes", "d2h_pageable",
                "d2h_pinned", "memcpy_calls", "kernel_launches", "graph_launches", "memset_calls", "sync_calls",
                "device_syncs", "sync_memcpy_calls", "gpu_kernels", "graph_kernels", "graph_executions")
        return {k: self.slot[k] for k in keys}


def safe_div(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


BATCH_FIXED = ("start", "end", "gtid", "size", "host_ns", *BATCH_KEYS, "gpu_busy_ns", "gpu_own_ns")


def check_name_lengths(config) -> None:
    """Refuse a stage, batch or domain name longer than names are read (NAME_CHARS): it could match
    no range, and a pattern of it would exceed SQLite's limits."""
    from ..read.export import NAME_CHARS

    # a batch range's message holds ` n=K` after its name: 16 characters of the names read are kept for it
    for what, name, most in (("batch range", config.batch, NAME_CHARS - 16), ("domain", config.domain, NAME_CHARS),
                             *(("stage", s, NAME_CHARS) for s in config.stages)):
        if len(name) > most:
            raise SpecError(f"{what} name {name[:40]!r}... of {len(name):,} characters: range names are read cut to "
                            f"{NAME_CHARS}, so it could name no range{' with its n=K' if most < NAME_CHARS else ''}; "
                            "shorten it")


def check_stage_names(stages: tuple[str, ...]) -> None:
    """Refuse stage names whose per-batch columns (`<stage>_ns`, `<stage>_<count>`) would be another
    column of the table (a stage named `host` would overwrite the batch's own `host_ns`)."""
    seen = set(BATCH_FIXED)
    for s in stages:
        for col in (f"{s}_ns", *(f"{s}_{k}" for k in BATCH_KEYS)):
            if col in seen:
                raise SpecError(f"stage name {s!r} clashes with the per-batch column {col!r}; rename the stage")
            seen.add(col)


def per_batch_table(stages, batch_counts: dict[str, np.ndarray] | None,
                    gpu_covered_ns: np.ndarray | None) -> Table:
    """One row per batch (the unit `compare` resamples): size, host ns of the batch and of each
    stage, the CUDA work launched inside it (`CudaTally.batch`; None without CUDA trace), the
    ns of its host span during which the GPU was busy, the busy ns of its own GPU work, and the
    CUDA work launched in each stage (`<stage>_<count>`)."""
    b = stages.batches
    n = len(b)
    out = Table(start=b["start"], end=b["end"], gtid=b["gtid"], size=b["size"], host_ns=b["end"] - b["start"])
    inst = stages.instances
    inside = inst[inst["batch"] >= 0]
    dur = inside["end"] - inside["start"]
    codes = inside["code"]
    for code, name in enumerate(stages.config.stages):
        m = codes == code
        out[f"{name}_ns"] = np.bincount(inside["batch"][m], weights=dur[m], minlength=n)[:n].astype(np.int64)
    if batch_counts is not None:
        for key in BATCH_KEYS:
            out[key] = batch_counts[key].sum(axis=1)
        out["gpu_busy_ns"] = gpu_covered_ns if gpu_covered_ns is not None else 0
        out["gpu_own_ns"] = batch_counts["gpu_own_ns"]
        for code, name in enumerate(stages.config.stages):
            for key in BATCH_KEYS:
                out[f"{name}_{key}"] = batch_counts[key][:, code]
    return out
