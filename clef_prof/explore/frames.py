"""A capture as pandas DataFrames, for notebooks and reports: `clef_prof.open(path)` -> `Capture`.

`Capture` wraps one `analyze` run and presents its rows with readable labels: stage names,
pid/tid with process and thread names, copy directions and memory kinds, API kinds. Frames are
built on first access and kept; `open` keeps the last few captures, so a notebook cell that
opens the same export again costs nothing.

Conventions of every frame (see each property for its columns):

- times are integer nanoseconds from the session start (`*_ns`); durations are `duration_ns`
  (and `duration_ms`, float, where it is the figure one plots);
- `batch` is the index of the batch range in `Capture.batches` (time order), -1 outside any;
- `stage` is a categorical over the analysis slots: the stage names in configuration order,
  then `"<batch> (no stage)"` (inside a batch range, in no stage), then `"outside"` (outside
  every batch range);
- `pid`/`tid` are the OS ids (decoded from nsys' serialized ids), `process`/`thread` their names
  where the export records them (else empty).
"""
from __future__ import annotations

import os
from functools import cached_property

import numpy as np
import pandas as pd

from ..analyze.figures import cuda as cu
from ..analyze.read.filecache import FileCache
from ..analyze.model import Overlap, PerRequest, Result
from ..analyze.pipeline import Analysis, analyze
from ..analyze.figures.stages import StageConfig
from ..base.redact import RID

__all__ = ["Capture", "open", "clear_cache", "arm_means", "parse_rids", "COPY_DIRECTIONS", "MEMORY_KINDS", "API_KINDS"]

# ENUM_CUDA_MEMCPY_OPER (nsys 2022.4 .. 2025.3)
COPY_DIRECTIONS = {0: "unknown", 1: "H2D", 2: "D2H", 3: "H2A", 4: "A2H", 5: "A2A", 6: "A2D", 7: "D2A", 8: "D2D",
                   9: "H2H", 10: "P2P", 11: "UVM H2D", 12: "UVM D2H", 13: "UVM D2D"}
# ENUM_CUDA_MEM_KIND
MEMORY_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
                6: "managed static", 7: "unknown"}
# clef_prof.analyze.figures.cuda call kinds; 0: a GPU row whose API call was not found
# analyze.figures.cuda's API call kinds (the numbers are its own, not an nsys enum)
API_KINDS = {0: "unpaired", cu.LAUNCH: "kernel launch", cu.GRAPH: "graph launch", cu.COPY: "memcpy", cu.SET: "memset",
             cu.SYNC: "sync"}
_HOST_SIDE_SRC = {1, 3, 9, 11}     # directions whose source is host memory (H2D, H2A, H2H, UVM H2D)

_CACHE = FileCache(8)


def _labels(codes: np.ndarray, table: dict[int, str]) -> pd.Categorical:
    cats = list(dict.fromkeys(table.values()))
    return pd.Categorical([table.get(int(c), "unknown") for c in codes], categories=cats)


def _pid(g: np.ndarray) -> np.ndarray:
    return (np.asarray(g, dtype=np.int64) >> 24) & 0xFFFFFF


def _tid(g: np.ndarray) -> np.ndarray:
    return np.asarray(g, dtype=np.int64) & 0xFFFFFF


def parse_rids(message: str) -> list[str]:
    """Request ids in a batch message: `rid=a,b,c` (also `rids=`, `request_ids=`); [] when none."""
    m = RID.search(message or "")
    if not m:
        return []
    return [r for r in m.group(1).split(",") if r]


class Capture:
    """One analyzed capture as DataFrames. Build it with `clef_prof.open(path)`.

    Attributes:
        path: the export. analysis: the `clef_prof.analyze.pipeline.Analysis` behind it.
        result: analyze's typed `clef_prof.analyze.model.Result` (`result.to_json()` is the JSON
        contract, docs/json.md). config: the `StageConfig` used.

    Frames (each built on first access): `stages`, `batches`, `requests`, `transfers`,
    `launches`, `kernels`, `api_calls`, `gpu_busy`, `threads`; and `summary()`.
    """

    def __init__(self, analysis: Analysis):
        self.analysis = analysis
        self.path: str = analysis.path
        self.config: StageConfig = analysis.config
        self.result: Result = analysis.result

    # --- facts ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(self.config.stages)

    @property
    def slots(self) -> list[str]:
        """Categories of every `stage` column: stages, '<batch> (no stage)', 'outside'."""
        return list(self.result.slots or [*self.config.stages, f"{self.config.batch} (no stage)", "outside"])

    @property
    def n_requests(self) -> int | None:
        return self.result.requests

    @property
    def cuda_traced(self) -> bool:
        return bool(self.result.capture.cuda_traced)

    @property
    def warnings(self) -> list[str]:
        return list(self.result.warnings)

    @property
    def per_request(self) -> PerRequest:
        """analyze's per-request figures (copies, bytes, launches, host ms, GPU busy ms per request)."""
        return self.result.per_request

    @property
    def overlap(self) -> Overlap:
        """analyze's GPU overlap figures (GPU busy during the batch host span)."""
        return self.result.overlap

    def __repr__(self) -> str:
        cap = self.result.capture
        return (f"<Capture {self.name}: {self.n_requests if self.n_requests is not None else '?'} requests, "
                f"{self.result.batches} batches, nsys {cap.nsys_version or '?'}, "
                f"CUDA {'traced' if self.cuda_traced else 'not traced'}, {len(self.warnings)} warning(s)>")

    def _repr_html_(self) -> str:
        head = f"<p><b>{self.name}</b>: {self.n_requests} requests, {self.result.batches} batches</p>"
        return head + self.summary().to_html(float_format=lambda v: f"{v:.4g}", na_rep="—")

    # --- helpers --------------------------------------------------------------------------
    def _slot(self, codes) -> pd.Categorical:
        return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64), categories=self.slots)

    @cached_property
    def _names(self) -> tuple[dict[int, str], dict[int, str]]:
        """(thread names by serialized tid, process names by pid)."""
        from ..analyze.read.export import NAME_CHARS, Export
        from ..base.redact import process_name

        tnames: dict[int, str] = {}
        pnames: dict[int, str] = {}
        with Export.open(self.path) as cap:
            if cap.has("ThreadNames") and {"nameId", "globalTid"} <= set(cap.columns("ThreadNames")):
                strings = cap.strings
                for name_id, gtid in cap.rows("SELECT nameId, globalTid FROM ThreadNames"):
                    if gtid is not None:
                        tnames[int(gtid)] = strings.get(int(name_id), "") if name_id is not None else ""
            if cap.has("PROCESSES") and {"globalPid", "name"} <= set(cap.columns("PROCESSES")):
                for gpid, name in cap.rows(f"SELECT globalPid, substr(name, 1, {NAME_CHARS}) FROM PROCESSES"):
                    if gpid is not None:
                        main = tnames.get(int(gpid) | ((int(gpid) >> 24) & 0xFFFFFF))    # its tid = pid thread
                        pnames[int(_pid(np.array([gpid]))[0])] = process_name(name, main) if name else ""
        for t in self.result.capture.threads:
            g = (t.pid << 24) | t.tid
            if t.thread:
                tnames.setdefault(g, t.thread)
            if t.process:
                pnames.setdefault(t.pid, t.process)
        # nsys' serialized ids carry a hardware/VM id in the top bits: key threads by (pid, tid)
        tnames = {int(g) & 0xFFFFFFFFFFFF: v for g, v in tnames.items()}
        return tnames, pnames

    def _who(self, gtid: np.ndarray, with_thread: bool = True) -> dict[str, object]:
        g = np.asarray(gtid, dtype=np.int64)
        tnames, pnames = self._names
        pid, tid = _pid(g), _tid(g)
        out = {"pid": pid, "process": np.array([pnames.get(int(p), "") for p in pid], dtype=object)}
        if with_thread:
            out["tid"] = tid
            key = g & 0xFFFFFFFFFFFF
            out["thread"] = np.array([tnames.get(int(k), "") for k in key], dtype=object)
        return out

    def _call_cols(self, call: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start_ns, gtid) of the API call of each GPU row; -1 / 0 where unpaired."""
        c = self.analysis.calls
        call = np.asarray(call, dtype=np.int64)
        if len(c) == 0 or len(call) == 0:
            return np.full(len(call), -1, np.int64), np.zeros(len(call), np.int64)
        cs, cg = c["start"].to_numpy(), c["gtid"].to_numpy()
        ok = call >= 0
        j = np.maximum(call, 0)
        return np.where(ok, cs[j], -1), np.where(ok, cg[j], 0)

    # --- frames ---------------------------------------------------------------------------
    @cached_property
    def threads(self) -> pd.DataFrame:
        """Threads that hold stage ranges: pid, tid, process, thread, batches, stage_instances."""
        rows = [{"pid": t.pid, "tid": t.tid, "process": t.process or "", "thread": t.thread or "",
                 "batches": t.batches, "stage_instances": sum(t.stage_instances.values())}
                for t in self.result.capture.threads]
        return pd.DataFrame(rows, columns=["pid", "tid", "process", "thread", "batches", "stage_instances"])

    @cached_property
    def stages(self) -> pd.DataFrame:
        """One row per stage instance (an NVTX range of a stage name).

        | column | unit / type | meaning |
        |---|---|---|
        | batch | int | index into `batches`; -1 when the range lies in no batch range |
        | stage | categorical | stage name (configuration order) |
        | start_ns, end_ns | ns from session start | the range |
        | duration_ns / duration_ms | ns / ms | end - start |
        | batch_size | requests | size of its batch (0 outside batches or when unknown) |
        | pid, tid, process, thread | | the thread that pushed the range |
        """
        inst = self.analysis.stages.instances
        b = inst["batch"].astype(np.int64)
        sizes = self.analysis.stages.batches["size"]
        start, end = inst["start"], inst["end"]
        df = pd.DataFrame({
            "batch": b,
            "stage": pd.Categorical.from_codes(inst["code"], categories=list(self.config.stages)),
            "start_ns": start, "end_ns": end, "duration_ns": end - start, "duration_ms": (end - start) / 1e6,
            "batch_size": np.where(b >= 0, sizes[np.maximum(b, 0)] if len(sizes) else 0, 0).astype(np.int64),
            **self._who(inst["gtid"]),
        })
        return df

    @cached_property
    def _messages(self) -> np.ndarray:
        """The message of each batch range (for `n=K` and `rid=`), aligned with `batches`."""
        from ..analyze.read.export import Export
        from ..analyze.read.nvtx import read_ranges

        b = self.analysis.stages.batches
        if len(b) == 0:
            return np.zeros(0, dtype=object)
        with Export.open(self.path) as cap:
            r = read_ranges(cap, self.config.domain, [self.config.batch], [self.config.batch])
        ranges = pd.DataFrame({"gtid": r.gtid, "start": r.start, "end": r.end, "message": r.name})
        ranges = ranges.drop_duplicates(["gtid", "start", "end"])
        m = b.select(["gtid", "start", "end"]).frame().merge(ranges, how="left", on=["gtid", "start", "end"])
        return m["message"].fillna("").to_numpy(dtype=object)

    @cached_property
    def batches(self) -> pd.DataFrame:
        """One row per batch range (`pooler n=K`), in time order; the row index is `batch`.

        | column | unit / type | meaning |
        |---|---|---|
        | batch | int | 0.. in time order (the `batch` of every other frame) |
        | start_ns, end_ns, duration_ns, duration_ms | ns / ms | the batch range (host span) |
        | size | requests | `n=K` of the message (or the payload); 0 when unknown |
        | message | str | the range's message |
        | rids | list[str] | request ids from `rid=a,b,...` in the message; [] when none |
        | `<stage>_ns` | ns | host time of each stage in this batch (instances summed) |
        | kernel_launches, graph_launches | calls | launch API calls inside the batch |
        | h2d_copies, h2d_bytes, d2h_copies, d2h_bytes | copies / B | copies launched inside the batch |
        | gpu_busy_ns | ns | part of the batch's host span during which its process's GPU was busy |
        | gpu_own_ns | ns | union of the GPU intervals launched inside the batch (its own GPU work) |
        | `<stage>_kernel_launches`, ..., `<stage>_d2h_bytes` | calls / copies / B | the six counts above, of each stage |
        | gpu_busy_fraction | 0..1 | gpu_busy_ns / duration_ns |
        | host_ms_per_request | ms | duration_ms / size (NaN when size is 0) |
        | pid, tid, process, thread | | the thread that pushed the range |

        CUDA columns are absent when the capture did not trace CUDA.
        """
        pb = self.analysis.batch_table
        b = self.analysis.stages.batches
        n = len(b)
        start, end = b["start"], b["end"]
        size = b["size"].astype(np.int64)
        msgs = self._messages
        df = pd.DataFrame({"batch": np.arange(n), "start_ns": start, "end_ns": end, "duration_ns": end - start,
                           "duration_ms": (end - start) / 1e6, "size": size, "message": msgs,
                           "rids": [parse_rids(m) for m in msgs]})
        skip = {"start", "end", "gtid", "size", "host_ns"}
        if pb is not None:
            for col in pb.columns:
                if col not in skip:
                    df[col] = pb[col]
        if "gpu_busy_ns" in df:
            df["gpu_busy_fraction"] = df["gpu_busy_ns"] / np.maximum(df["duration_ns"], 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            df["host_ms_per_request"] = np.where(size > 0, df["duration_ms"] / np.maximum(size, 1), np.nan)
        for k, v in self._who(b["gtid"]).items():
            df[k] = v
        return df

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request: each batch expanded by its size (a batch of size 0 adds none).

        A request's own start and end are not in the capture; the host span is its batch's.
        Empty when batch sizes are unknown (no `n=K` or payload; `requests=N` gives only a total).

        | column | unit / type | meaning |
        |---|---|---|
        | request | int | 0.. in batch order |
        | rid | str or <NA> | request id from `rid=` in the batch message, in order; <NA> when absent |
        | batch, position | int | its batch, and its place in the batch (0..size-1) |
        | batch_size | requests | |
        | batch_start_ns, batch_end_ns | ns | the batch range |
        | host_ms_per_request | ms | the batch's host span / size (an equal share) |
        | h2d_copies, h2d_bytes, kernel_launches | per request | the batch's figures / size (CUDA only) |

        When the capture holds request ranges (`clef_prof.request`, docs/journey.md) a request is one
        request range instead, in start order, with its journey:

        | column | unit / type | meaning |
        |---|---|---|
        | request | int | 0.. in start order |
        | rid | str | the request range's id |
        | pid, tid, process, thread | | the thread that opened the request range |
        | cut | bool | still open at the capture's end (its segments are 0) |
        | batch, batch_size | int / requests | the batch whose rid= list names it (-1, 0: none in the capture) |
        | start_ns, end_ns, e2e_ns | ns | the request range and its span |
        | receive_ns, queue_ns, batch_ns, after_batch_ns, encode_ns, send_ns, unattributed_ns | ns | its segments (they sum to e2e_ns) |
        | enqueue_ns, batch_start_ns, batch_end_ns, encode_start_ns, encode_end_ns | ns | its points; -1 where absent |
        | out_of_order | bool | a point lay before the one it follows (moved up to it) |
        | other_ranks_ns | ns | of batch_ns, the part outside its first rank's batch (tensor-parallel ranks; else 0) |
        | batch_start_ns, batch_end_ns, host_ms_per_request, h2d_copies, h2d_bytes, kernel_launches | | as above, of its batch (NaN: none) |
        """
        if self.analysis.journeys is not None:
            return self._journey_requests()
        b = self.batches
        size = b["size"].to_numpy()
        batch = np.repeat(b["batch"].to_numpy(), size)
        pos = np.concatenate([np.arange(k) for k in size]) if len(size) else np.zeros(0, np.int64)
        rids = []
        for lst, k in zip(b["rids"], size):
            rids += [lst[i] if i < len(lst) else pd.NA for i in range(k)]
        df = pd.DataFrame({"request": np.arange(len(batch)), "rid": pd.array(rids, dtype="string"),
                           "batch": batch, "position": pos.astype(np.int64),
                           "batch_size": np.repeat(size, size),
                           "batch_start_ns": np.repeat(b["start_ns"].to_numpy(), size),
                           "batch_end_ns": np.repeat(b["end_ns"].to_numpy(), size),
                           "host_ms_per_request": np.repeat(b["host_ms_per_request"].to_numpy(), size)})
        for col in ("h2d_copies", "h2d_bytes", "kernel_launches"):
            if col in b:
                df[col] = np.repeat(b[col].to_numpy() / np.maximum(size, 1), size)
        return df

    def _journey_requests(self) -> pd.DataFrame:
        from ..analyze.figures.journey import SEGMENTS

        t = self.analysis.journeys
        bi = t["batch"]
        df = pd.DataFrame({"request": np.arange(len(t)), "rid": pd.array(t["rid"], dtype="string"),
                           **self._who(t["gtid"]), "cut": t["cut"], "batch": bi, "batch_size": t["batch_size"],
                           "start_ns": t["start"], "end_ns": t["end"], "e2e_ns": t["e2e_ns"],
                           **{f"{s}_ns": t[f"{s}_ns"] for s in SEGMENTS},
                           "enqueue_ns": t["enqueue"], "batch_start_ns": t["batch_start"], "batch_end_ns": t["batch_end"],
                           "encode_start_ns": t["encode_start"], "encode_end_ns": t["encode_end"],
                           "out_of_order": t["out_of_order"], "other_ranks_ns": t["other_ranks_ns"]})
        b = self.batches
        has = bi >= 0
        j = np.maximum(bi, 0)
        for col in ("host_ms_per_request", "h2d_copies", "h2d_bytes", "kernel_launches"):
            if col in b and len(b):
                v = b[col].to_numpy(dtype=np.float64)
                if col != "host_ms_per_request":
                    v = v / np.maximum(b["size"].to_numpy(), 1)
                df[col] = np.where(has, v[j], np.nan)
        return df

    def _empty(self, cols: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})

    @cached_property
    def transfers(self) -> pd.DataFrame:
        """One row per GPU memcpy record (`CUPTI_ACTIVITY_KIND_MEMCPY`).

        | column | unit / type | meaning |
        |---|---|---|
        | start_ns, end_ns, duration_ns | ns | the copy on the GPU |
        | direction | categorical | H2D, D2H, D2D, H2H, P2P, ... |
        | bytes | B | bytes of the record |
        | copies | copies | logical copies of the record (`copyCount`, 1 before nsys 2025) |
        | memory | categorical | host-side memory: source of H2D/H2H, destination of D2H (pageable, pinned, ...) |
        | src_kind, dst_kind | categorical | source and destination memory kinds |
        | stage, batch | | where its launching API call ran |
        | api | categorical | kind of the launching call (memcpy, ...; 'unpaired' when not found) |
        | call_start_ns | ns | start of the launching call (-1 when unpaired) |
        | pid, device | | process and GPU of the copy |
        | tid, thread | | thread of the launching call (0 / '' when unpaired) |
        | corr | | correlationId |
        """
        cols = {"start_ns": "int64", "end_ns": "int64", "duration_ns": "int64", "direction": "category",
                "bytes": "int64", "copies": "int64", "memory": "category", "src_kind": "category",
                "dst_kind": "category", "stage": "category", "batch": "int64", "api": "category",
                "call_start_ns": "int64", "pid": "int64", "device": "int64", "tid": "int64", "thread": "object",
                "corr": "int64"}
        t = self.analysis.transfers
        if not self.cuda_traced or len(t) == 0:
            return self._empty(cols)
        ck, sk, dk = (t[c].to_numpy() for c in ("copyKind", "srcKind", "dstKind"))
        host_kind = np.where(np.isin(ck, list(_HOST_SIDE_SRC)), sk, np.where(np.isin(ck, [2, 4, 12]), dk, sk))
        cstart, cgtid = self._call_cols(t["call"].to_numpy())
        who = self._who(cgtid)
        df = pd.DataFrame({
            "start_ns": t["start"].to_numpy(), "end_ns": t["end"].to_numpy(),
            "duration_ns": t["end"].to_numpy() - t["start"].to_numpy(),
            "direction": _labels(ck, COPY_DIRECTIONS), "bytes": t["bytes"].to_numpy(),
            "copies": t["copies"].to_numpy(), "memory": _labels(host_kind, MEMORY_KINDS),
            "src_kind": _labels(sk, MEMORY_KINDS), "dst_kind": _labels(dk, MEMORY_KINDS),
            "stage": self._slot(t["slot"].to_numpy()), "batch": t["batch"].to_numpy(),
            "api": _labels(t["api_kind"].to_numpy(), API_KINDS), "call_start_ns": cstart,
            "pid": _pid(t["gpid"].to_numpy()), "device": t["device"].to_numpy(),
            "tid": np.where(cgtid != 0, who["tid"], 0), "thread": who["thread"], "corr": t["corr"].to_numpy(),
        })
        return df.sort_values("start_ns", kind="stable").reset_index(drop=True)

    @cached_property
    def api_calls(self) -> pd.DataFrame:
        """CUDA API calls of interest (launches, graph launches, memcpy, memset, syncs), one row each.

        | column | unit / type | meaning |
        |---|---|---|
        | call | int | row number in analyze's call table (what GPU rows link to) |
        | kind | categorical | kernel launch, graph launch, memcpy, memset, sync |
        | start_ns, end_ns, duration_ns | ns | the API call on the host |
        | stage, batch | | innermost stage range / batch range holding it on its thread |
        | pid, tid, process, thread | | |
        | corr | | correlationId |
        """
        cols = {"call": "int64", "kind": "category", "start_ns": "int64", "end_ns": "int64", "duration_ns": "int64",
                "stage": "category", "batch": "int64", "pid": "int64", "tid": "int64", "process": "object",
                "thread": "object", "corr": "int64"}
        c = self.analysis.calls
        if not self.cuda_traced or len(c) == 0:
            return self._empty(cols)
        s, e = c["start"].to_numpy(), c["end"].to_numpy()
        return pd.DataFrame({"call": np.arange(len(c)), "kind": _labels(c["kind"].to_numpy(), API_KINDS),
                             "start_ns": s, "end_ns": e, "duration_ns": e - s,
                             "stage": self._slot(c["slot"].to_numpy()), "batch": c["batch"].to_numpy(),
                             **self._who(c["gtid"].to_numpy()), "corr": c["corr"].to_numpy()})

    @cached_property
    def launches(self) -> pd.DataFrame:
        """Kernel launches and graph launches (API calls), one row each, with their GPU span.

        | column | unit / type | meaning |
        |---|---|---|
        | kind | str | 'kernel' (cudaLaunchKernel, cuLaunchKernel, ...) or 'graph' (cudaGraphLaunch, ...) |
        | start_ns, end_ns, duration_ns | ns | the API call on the host |
        | stage, batch | | where the call ran |
        | gpu_kernels | int | GPU kernel records of this launch (0 for a graph launch traced as a whole) |
        | gpu_start_ns, gpu_end_ns | ns (nullable) | first start and last end of those records |
        | pid, tid, process, thread, corr | | |
        """
        calls = self.api_calls
        m = calls["kind"].isin(["kernel launch", "graph launch"]).to_numpy()
        sub = calls[m].reset_index(drop=True)
        kind = np.where(sub["kind"].astype(str).to_numpy() == "graph launch", "graph", "kernel")
        k = self.analysis.kernels
        n_k = np.zeros(len(sub), np.int64)
        g0 = pd.array([pd.NA] * len(sub), dtype="Int64")
        g1 = pd.array([pd.NA] * len(sub), dtype="Int64")
        if len(sub) and len(k):
            kc = k["call"].to_numpy()
            ok = kc >= 0
            agg = pd.DataFrame({"call": kc[ok], "s": k["start"].to_numpy()[ok], "e": k["end"].to_numpy()[ok]}) \
                .groupby("call").agg(n=("s", "size"), s=("s", "min"), e=("e", "max"))
            j = agg.reindex(sub["call"].to_numpy())
            n_k = j["n"].fillna(0).to_numpy().astype(np.int64)
            g0 = pd.array(j["s"].to_numpy(), dtype="Int64")
            g1 = pd.array(j["e"].to_numpy(), dtype="Int64")
        df = sub.drop(columns=["kind"])
        df.insert(1, "kind", pd.Categorical(kind, categories=["kernel", "graph"]))
        df["gpu_kernels"] = n_k
        df["gpu_start_ns"] = g0
        df["gpu_end_ns"] = g1
        cols = ["call", "kind", "start_ns", "end_ns", "duration_ns", "stage", "batch", "gpu_kernels",
                "gpu_start_ns", "gpu_end_ns", "pid", "tid", "process", "thread", "corr"]
        return df[cols]

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """GPU kernel records (`CUPTI_ACTIVITY_KIND_KERNEL`), one row each.

        | column | unit / type | meaning |
        |---|---|---|
        | start_ns, end_ns, duration_ns | ns | the kernel on the GPU |
        | from_graph | bool | launched by a graph launch (node-level graph trace) |
        | stage, batch | | where its launching API call ran |
        | call_start_ns | ns | start of the launching call (-1 when unpaired) |
        | pid, device, tid, corr | | process and GPU; thread of the launching call |
        """
        cols = {"start_ns": "int64", "end_ns": "int64", "duration_ns": "int64", "from_graph": "bool",
                "stage": "category", "batch": "int64", "call_start_ns": "int64", "pid": "int64", "device": "int64",
                "tid": "int64", "corr": "int64"}
        k = self.analysis.kernels
        if not self.cuda_traced or len(k) == 0:
            return self._empty(cols)
        cstart, cgtid = self._call_cols(k["call"].to_numpy())
        s, e = k["start"].to_numpy(), k["end"].to_numpy()
        return pd.DataFrame({"start_ns": s, "end_ns": e, "duration_ns": e - s,
                             "from_graph": k["from_graph"].to_numpy().astype(bool),
                             "stage": self._slot(k["slot"].to_numpy()), "batch": k["batch"].to_numpy(),
                             "call_start_ns": cstart, "pid": _pid(k["gpid"].to_numpy()),
                             "device": k["device"].to_numpy(), "tid": _tid(cgtid), "corr": k["corr"].to_numpy()})

    @cached_property
    def gpu_busy(self) -> pd.DataFrame:
        """Every GPU interval that makes the GPU busy: kernels, memcpy, memset, graph executions.

        | column | unit / type | meaning |
        |---|---|---|
        | kind | categorical | kernel, memcpy, memset, graph (GRAPH_TRACE rows, nsys >= 2024, graph mode) |
        | start_ns, end_ns, duration_ns | ns | on the GPU |
        | stage, batch | | where the launching call ran |
        | pid | | process |

        Overlapping intervals are not merged (analyze's overlap uses their union per process).
        """
        cols = {"kind": "category", "start_ns": "int64", "end_ns": "int64", "duration_ns": "int64",
                "stage": "category", "batch": "int64", "pid": "int64"}
        g = self.analysis.gpu_busy
        if not self.cuda_traced or len(g) == 0:
            return self._empty(cols)
        s, e = g["start"].to_numpy(), g["end"].to_numpy()
        df = pd.DataFrame({"kind": pd.Categorical(g["kind"].to_numpy(), categories=["kernel", "memcpy", "memset",
                                                                                   "graph"]),
                           "start_ns": s, "end_ns": e, "duration_ns": e - s,
                           "stage": self._slot(g["slot"].to_numpy()), "batch": g["batch"].to_numpy(),
                           "pid": _pid(g["gpid"].to_numpy())})
        return df.sort_values("start_ns", kind="stable").reset_index(drop=True)

    @cached_property
    def samples(self) -> pd.DataFrame:
        """Python samples per stage and stack (clef-prof's sampler; docs/sampling.md): one row per
        (slot, distinct stack) with samples, the rows the HTML report's icicles are made of.

        | column | unit / type | meaning |
        |---|---|---|
        | stage | categorical | the stage names, then "(batch)" and "(outside)" (analyze.figures.samples' slots) |
        | samples | count | samples of this stack in this slot |
        | ms_per_request | ms | samples x ms per sample / requests (NaN without requests) |
        | function, file | | the innermost frame (self time) |
        | depth | frames | the stack's depth |
        | stack | tuple of str | `function (file)` of each frame, outermost first |

        Empty (these columns) when the capture holds no samples.
        """
        sc = self.analysis.sample_counts
        cols = {"stage": "category", "samples": "int64", "ms_per_request": "float64", "function": "object",
                "file": "object", "depth": "int64", "stack": "object"}
        if sc is None:
            return self._empty(cols)
        slot_i, stack_j = np.nonzero(sc.counts)
        n = sc.counts[slot_i, stack_j]
        req = self.result.requests
        per = sc.ms_per_sample / req if req and sc.ms_per_sample is not None else np.nan
        label = [f"{f} ({fl.rsplit('/', 1)[-1]})" if fl else f for f, fl in zip(sc.func_name, sc.func_file)]
        stacks = [tuple(label[f] for f in reversed(sc.stacks[j])) for j in stack_j.tolist()]
        leaf = np.array([sc.stacks[j][0] for j in stack_j.tolist()], dtype=np.int64)
        return pd.DataFrame({
            "stage": pd.Categorical([sc.slots[i] for i in slot_i.tolist()], categories=sc.slots),
            "samples": n.astype(np.int64), "ms_per_request": n * per,
            "function": [sc.func_name[f] for f in leaf.tolist()], "file": [sc.func_file[f] for f in leaf.tolist()],
            "depth": np.array([len(st) for st in stacks], dtype=np.int64), "stack": stacks})

    # --- summaries ------------------------------------------------------------------------
    def summary(self) -> pd.DataFrame:
        """analyze's per-stage figures, one row per stage plus one for the batch range as a whole.

        Index: stage names, then `"<batch> (batch)"`. Columns: the keys of analyze's stage block
        (docs/json.md): instances, host_ms_total, host_ms_per_request, host_ms_mean/p50/p99 (per batch),
        then, with CUDA, h2d_copies, h2d_bytes, h2d_pageable, h2d_pinned, d2h_copies, d2h_bytes,
        kernel_launches, graph_launches, graph_kernels, gpu_kernels, graph_executions,
        memcpy_calls, memset_calls, sync_calls (per capture) and the `*_per_request` figures.
        `null` figures are NaN.
        """
        rows = {name: s.to_json() for name, s in self.result.stages.items()}
        pooler = self.result.pooler
        if pooler.instances:
            rows[f"{self.config.batch} (batch)"] = {k: v for k, v in pooler.to_json().items() if k != "name"}
        df = pd.DataFrame.from_dict(rows, orient="index")
        if not self.cuda_traced:
            df = df[[c for c in df.columns if c in ("instances", "host_ns_total") or c.startswith("host_ms")]]
        df.index.name = "stage"
        return df.apply(pd.to_numeric, errors="coerce")


def arm_means(captures: dict[str, "Capture"]) -> dict:
    """Per-arm figures of analyze, in the shape of compare's JSON, without intervals.

    `captures` maps an arm name to a Capture (the first is the baseline). Metrics:
    `per_request.*`, `stages.<s>.host_ms_per_request` and, with CUDA,
    `stages.<s>.h2d_copies_per_request`; each entry `{"metric", "unit", "arms": {name: {"mean"}},
    "change", "change_pct", "ci": None}`. For intervals use `clef-prof compare` (its engine
    bootstraps batches); this is what one capture per arm says, point estimates only.
    """
    names = list(captures)
    if not names:
        raise ValueError("arm_means needs at least one arm")
    first = captures[names[0]]
    stages = first.stage_names
    cuda = all(c.cuda_traced for c in captures.values())
    keys = [("per_request.pooler_host_ms", "ms/request")]
    keys += [(f"stages.{s}.host_ms_per_request", "ms/request") for s in stages]
    if cuda:
        keys += [("per_request.h2d_copies", "/request"), ("per_request.h2d_bytes", "B/request"),
                 ("per_request.d2h_copies", "/request"), ("per_request.kernel_launches", "/request"),
                 ("per_request.graph_launches", "/request"), ("per_request.gpu_busy_ms", "ms/request")]
        keys += [(f"stages.{s}.h2d_copies_per_request", "/request") for s in stages]

    metrics = []
    for key, unit in keys:
        arms = {n: {"mean": captures[n].result.figure(key)} for n in names}
        base = arms[names[0]]["mean"]
        entry = {"metric": key, "unit": unit, "arms": arms, "ci": None, "change": None, "change_pct": None}
        for n in names[1:]:
            m = arms[n]["mean"]
            if m is not None and base is not None:
                arms[n]["change"] = m - base
                arms[n]["change_pct"] = 100.0 * (m - base) / base if base else None
        if len(names) > 1:
            entry["change"] = arms[names[1]].get("change")
            entry["change_pct"] = arms[names[1]].get("change_pct")
        metrics.append(entry)
    return {"schema": "clef-prof/arm-means/1", "baseline": names[0], "source": "analyze results, no intervals",
            "arms": {n: {"path": c.path, "requests": c.n_requests, "batches": c.result.batches}
                     for n, c in captures.items()},
            "metrics": metrics}


def open(path, config: StageConfig | None = None, *, domain: str | None = None, batch: str | None = None,  # noqa: A001
         stages=None, spec: str | None = None, requests: int | None = None, cache: bool = True) -> Capture:
    """Analyze an nsys SQLite export once and return it as a `Capture`.

    `config` (or `spec`, a stage-spec TOML, or `domain`/`batch`/`stages` overrides) picks the
    NVTX ranges, as `clef-prof analyze` does; `requests` overrides the request count. The last
    few captures are kept in memory keyed on (real path, size, mtime, configuration): opening
    the same export again returns the same object. `cache=False` reads it anew.

    Raises `clef_prof.base.errors.ClefError` (CaptureError, SpecError) for bad input.
    """
    path = os.fspath(path)
    from ..analyze.read.kineto import is_trace, to_export
    from ..annotate.spec import stage_config

    if is_trace(path):
        path = to_export(path)

    config = stage_config(spec, domain, batch, stages, base=config)
    key = _CACHE.key(path, config, requests) if cache else None
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    cap = Capture(analyze(path, config, requests=requests, rows=True))
    _CACHE.put(key, cap)
    return cap


def clear_cache() -> None:
    """Forget every capture `open` kept."""
    _CACHE.clear()
