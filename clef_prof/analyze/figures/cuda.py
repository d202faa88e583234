"""CUDA API calls and the GPU work they caused, paired on (process, correlationId).

API names carry ABI suffixes (`cudaLaunchKernel_v7000`, `_ptsz`); they are classified once
per distinct name, then rows are selected in SQL by nameId.
"""
from __future__ import annotations

import re

import numpy as np

from ..read.export import Export, Query
from ...base.errors import CaptureError

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

# API call kinds
LAUNCH, GRAPH, COPY, SET, SYNC = 1, 2, 3, 4, 5

_LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
           "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
           "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice", "cuLaunchGrid",
           "cuLaunchGridAsync"}
_GRAPH = {"cudaGraphLaunch", "cuGraphLaunch"}
_SYNC = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
         "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
_SUFFIX = re.compile(r"(_v\d+)?(_pt(sz|ds))?$")
# what a synchronizing call waits for: a whole device/context, or a stream or event; and memcpy
# APIs without "Async", which return only when the copy is done
DEVICE_SYNC, STREAM_SYNC, SYNC_COPY = 1, 2, 3
_DEVICE_SYNC = {"cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize"}

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


def sync_kind(name: str) -> int:
    """DEVICE_SYNC, STREAM_SYNC (stream or event), SYNC_COPY (a memcpy API without Async), or 0."""
    base = _SUFFIX.sub("", name)
    if base in _DEVICE_SYNC:
        return DEVICE_SYNC
    if base in _SYNC:
        return STREAM_SYNC
    if base.startswith(("cudaMemcpy", "cuMemcpy")) and "Async" not in base:
        return SYNC_COPY
    return 0


def cuda_traced(cap: Export) -> bool:
    """True when the capture holds CUDA rows: API calls, or GPU activity (which `check_schema`
    refuses without its calls). nsys writes a table only when it has rows, so a capture traced
    without a CUDA call has none; the capture settings (absent before nsys 2023) are not needed."""
    return cap.has(RUNTIME) or any(cap.has(t) for t in GPU_REQUIRED)


GPU_REQUIRED = {MEMCPY: ("start", "end", "correlationId", "bytes", "copyKind"),
                KERNEL: ("start", "end", "correlationId"), MEMSET: ("start", "end", "correlationId"),
                GRAPH_TRACE: ("start", "end", "correlationId")}


def check_schema(cap: Export) -> None:
    """Refuse a traced capture whose CUDA tables lack what the figures are made of (a table or
    column renamed or dropped), rather than reading it as zeros."""
    gpu = [t for t in GPU_REQUIRED if cap.has(t)]
    if not cap.has(RUNTIME):
        if gpu:
            raise CaptureError(f"{cap.path}: GPU activity ({', '.join(gpu)}) but no {RUNTIME} table: the CUDA API "
                               "calls that launched it are missing, so it cannot be placed in stages; a damaged or "
                               "edited export")
        return
    if not cap.has("StringIds"):
        raise CaptureError(f"{cap.path}: no StringIds table: CUDA API names cannot be resolved; a damaged or "
                           "edited export")
    cap.require(RUNTIME, ("start", "end", "globalTid", "correlationId", "nameId"), "CUDA API calls need them")
    for t in gpu:
        cap.require(t, GPU_REQUIRED[t], "GPU activity figures need them")


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


class KindLookup:
    """nameId -> API call kind (int8): a dense table over StringIds ids, or a sorted one;
    `kind_lut`'s also carries `.sync`, nameId -> `sync_kind`."""

    def __init__(self, kinds: dict[int, int]):
        self.keys = np.array(sorted(kinds), dtype=np.int64)
        self.vals = np.array([kinds[k] for k in self.keys], dtype=np.int8)
        self.dense = None
        if len(self.keys) and 0 <= self.keys[0] and self.keys[-1] < (1 << 24):
            self.dense = np.zeros(int(self.keys[-1]) + 1, dtype=np.int8)
            self.dense[self.keys] = self.vals

    def __call__(self, name_ids: np.ndarray) -> np.ndarray:
        if len(name_ids) == 0 or len(self.keys) == 0:
            return np.zeros(len(name_ids), np.int8)
        if self.dense is not None:
            # ids beyond the table (e.g. a launch's, asked of the sync lookup) are of no kind,
            # not the kind of the table's last id
            inside = (name_ids >= 0) & (name_ids < len(self.dense))
            return np.where(inside, self.dense[np.clip(name_ids, 0, len(self.dense) - 1)], 0).astype(np.int8)
        pos = np.minimum(np.searchsorted(self.keys, name_ids), len(self.keys) - 1)
        return np.where(self.keys[pos] == name_ids, self.vals[pos], 0).astype(np.int8)


def kind_lut(cap: Export) -> tuple[KindLookup, list[int]]:
    """(nameId -> kind lookup; the StringIds ids of the calls of interest). Every API of interest
    starts with "cu": the other strings (kernel and range names, most of them) are not classified."""
    kinds = {i: api_kind(v) for i, v in cap.strings.items() if v.startswith("cu")}
    wanted = sorted(i for i, kd in kinds.items() if kd)
    lut = KindLookup({i: kinds[i] for i in wanted})
    lut.sync = KindLookup({i: k for i in wanted if (k := sync_kind(cap.strings[i]))})
    return lut, wanted


def _calls_sql(wanted: list[int], where: str = "") -> str:
    id_list = ",".join(str(i) for i in wanted) or "NULL"
    # no COALESCE: NULL reads as 0 anyway (capture.read), and each one costs a VM step per row
    return (f'SELECT start, "end", globalTid, correlationId, '
            f"nameId FROM {RUNTIME} WHERE nameId IN ({id_list}){' AND ' + where if where else ''}")


CALL_COLUMNS = ["start", "end", "gtid", "corr", "nameId"]


def call_queries(cap: Export, wanted: list[int], where: str = "") -> list[Query]:
    """The API calls of interest, in rowid windows (tag: ("calls", window number)); `where`
    filters further (an SQL condition on RUNTIME's columns); none without the table (it has no rowid window)."""
    return [Query(("calls", i), _calls_sql(wanted, f"{w} AND ({where})" if where else w), CALL_COLUMNS)
            for i, w in enumerate(cap.rowid_windows(RUNTIME))]


def last_api_end(cap: Export) -> int | None:
    """End of the last CUDA API row of any kind (a full scan of the runtime table)."""
    last = cap.rows(f'SELECT max("end") FROM {RUNTIME}')[0][0] if cap.has(RUNTIME) else None
    return None if last is None else int(last)


MEMCPY_EXTRA = [("bytes", "bytes", 0), ("copyKind", "copyKind", 0), ("srcKind", "srcKind", 7),
                ("dstKind", "dstKind", 7), ("copies", "copyCount", 1)]
GPU_TABLES = {MEMCPY: MEMCPY_EXTRA, KERNEL: [], MEMSET: [], GRAPH_TRACE: []}


def _gpu_spec(cap: Export, table: str, extra: list[tuple[str, str, int]], device: bool = True):
    """(the table's columns, (name, column, default) of each column read, the SELECT of those
    the table has, {name: default} of those it lacks)."""
    cols = cap.columns(table)
    spec = [("start", "start", 0), ("end", "end", 0), ("gpid", "globalPid", 0), ("corr", "correlationId", 0),
            *([("device", "deviceId", 0)] if device else []), *extra]
    # NULL reads as 0 (capture.read): COALESCE only where the default is not 0
    exprs = [f'COALESCE("{c}", {d})' if d else f'"{c}"' for _, c, d in spec if c in cols]
    fill = {n: d for n, c, d in spec if c not in cols}
    return cols, spec, f"SELECT {', '.join(exprs)} FROM {table}", fill


def gpu_queries(cap: Export, table: str, parts: int | None = None, device: bool = False,
                where: str = "") -> list[Query]:
    """One GPU table in rowid windows (`parts` of them, or windows of the default size), with
    the device column only when asked (tag: (table, window, windows)); `where` filters further
    (an SQL condition on the table's columns); none without the table (it has no rowid window)."""
    cols, spec, sql, fill = _gpu_spec(cap, table, GPU_TABLES[table], device=device)
    windows = cap.rowid_windows(table, parts=parts)
    return [Query((table, i, len(windows)), f"{sql} WHERE {w}{f' AND ({where})' if where else ''}",
                  [n for n, c, _ in spec if c in cols], fill=fill) for i, w in enumerate(windows)]


def has_pid(cap: Export, table: str) -> bool:
    """Whether any row of a GPU table carries a process id (else rows pair on correlationId alone)."""
    if "globalPid" not in cap.columns(table):
        return False
    return bool(cap.rows(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE COALESCE(globalPid, 0) != 0)")[0][0])


class CallIndex:
    """(process, correlationId) -> call number, for pairing GPU rows with their API call.

    Built chunk by chunk in call order; a key held by several calls pairs with the first one.
    Compact: correlationIds are kept as uint32 offsets when their range allows (in nsys
    exports they rise with time, so they are usually sorted already and need no index), and
    processes as small codes only when there are several; about 4 bytes per call.
    """

    def __init__(self):
        self._corr: list[tuple[int, np.ndarray]] = []         # (chunk minimum, offsets from it)
        self._pk: list[tuple[int, int, np.ndarray | None]] = []  # (code, rows, codes or None: all `code`)
        self._pk_codes: dict[int, int] = {}
        self.n = 0

    def add(self, corr: np.ndarray, pk: np.ndarray) -> None:
        """Append the calls of one chunk. Copies what it keeps: a view would hold the chunk's
        whole Arrow record batch in memory."""
        corr = np.asarray(corr, dtype=np.int64)
        pk = np.asarray(pk, dtype=np.int64)
        if len(corr) == 0:
            return
        lo = int(corr.min())
        span = int(corr.max()) - lo
        self._corr.append((lo, (corr - lo).astype(np.uint32 if span < 2**32 else np.int64)))
        if (pk == pk[0]).all():
            self._pk.append((self._pk_codes.setdefault(int(pk[0]), len(self._pk_codes)), len(pk), None))
        else:
            uniq, inv = np.unique(pk, return_inverse=True)
            codes = np.array([self._pk_codes.setdefault(int(p), len(self._pk_codes)) for p in uniq], dtype=np.int16)
            self._pk.append((-1, len(pk), codes[inv]))
        self.n += len(corr)

    def freeze(self) -> None:
        self.base = min((lo for lo, _ in self._corr), default=0)
        top = max((lo + int(c.max()) for lo, c in self._corr), default=0)
        self.span = top - self.base
        self.corr = np.empty(self.n, dtype=np.uint32 if self.span < 2**32 else np.int64)
        at = 0
        for lo, c in self._corr:
            # the offset in the index's own dtype: a Python int beyond uint32 (chunks of small
            # spans far apart) would not combine with a chunk's uint32 offsets
            np.add(c, self.corr.dtype.type(lo - self.base), out=self.corr[at:at + len(c)], casting="unsafe")
            at += len(c)
        self._corr = []
        self.pks = np.array(sorted(self._pk_codes, key=self._pk_codes.get), dtype=np.int64)
        self.pkc = None                         # one process: no per-call code
        if len(self.pks) > 1:
            self.pkc = np.empty(self.n, dtype=np.int16)
            at = 0
            for code, rows, codes in self._pk:
                self.pkc[at:at + rows] = code if codes is None else codes
                at += rows
        self._pk = []
        self._by_pk = None
        self._by_corr = None

    @staticmethod
    def _sorted(values: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(order or None when already sorted, sorted values); stable, so the first call wins."""
        if len(values) < 2 or (values[1:] >= values[:-1]).all():
            return None, values
        order = np.argsort(values, kind="stable")
        return order, values[order]

    def _index_by_corr(self):
        if self._by_corr is None:
            self._by_corr = self._sorted(self.corr)
        return self._by_corr

    def _index_by_pk(self):
        """Per process code: (rows of that process, order, sorted correlationIds)."""
        if self._by_pk is None:
            if self.pkc is None:
                self._by_pk = [(None, *self._index_by_corr())]
            else:
                blocks = []
                for code in range(len(self.pks)):
                    rows = np.flatnonzero(self.pkc == code)
                    blocks.append((rows, *self._sorted(self.corr[rows])))
                self._by_pk = blocks
        return self._by_pk

    @staticmethod
    def _search(rows, order, vals, q):
        """Call number of each id of `q` (not empty: `lookup` answers an empty query) in one block
        (not empty: a block holds the calls of its process), -1 when none."""
        # a window's ids lie close together: search the slice of the index between its least and
        # greatest (a few cache lines instead of a path through the whole index per id)
        a = int(np.searchsorted(vals, q.min(), side="left"))
        b = int(np.searchsorted(vals, q.max(), side="right"))
        pos = np.searchsorted(vals[a:b], q, side="left") + a
        posc = np.minimum(pos, len(vals) - 1)
        found = (pos < len(vals)) & (vals[posc] == q)
        idx = posc if order is None else order[posc]
        if rows is not None:
            idx = rows[idx]
        return np.where(found, idx, -1)

    def lookup(self, corr: np.ndarray, pk: np.ndarray | None = None) -> np.ndarray:
        """Call number of each (pk, corr) (of each corr when pk is None), -1 when none."""
        corr = np.asarray(corr, dtype=np.int64)
        if self.n == 0 or len(corr) == 0:
            return np.full(len(corr), -1, dtype=np.int64)
        q = corr - self.base
        ok = (q >= 0) & (q <= self.span)
        q = np.where(ok, q, 0).astype(self.corr.dtype)
        if pk is None:
            out = self._search(None, *self._index_by_corr(), q)
        else:
            pk = np.asarray(pk, dtype=np.int64)
            out = np.full(len(corr), -1, dtype=np.int64)
            for code, block in enumerate(self._index_by_pk()):
                m = pk == self.pks[code]
                if m.all():
                    out = self._search(*block, q)
                elif m.any():
                    out[m] = self._search(*block, q[m])
        out[~ok] = -1
        return out
