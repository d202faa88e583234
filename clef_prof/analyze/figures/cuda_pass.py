"""The CUDA passes of one capture: the API calls of interest, then the GPU activity tables,
streamed in rowid windows and reduced window by window (placed in stages, paired with their
calls, counted per slot and batch, merged into GPU busy time), and the row-level frames.

Memory stays bounded by the window size plus about 11 bytes per API call of interest. Pure
computation over the streamed columns; what is odd in them comes back as counts (`damage`,
`reversed`, unpaired copies, the lost tail) for `judge/` to put into words.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...base.errors import CaptureError
from ..model import LostRecords
from ..read.columns import Table
from ..read.export import Export
from . import cuda as cu
from .attribute import Placer
from .metrics import CudaTally
from .overlap import BusyStream, Unordered, span_union
from .stages import Stages, lost_tail

ROW_FRAMES = ("calls", "transfers", "kernels", "gpu_busy")
GPU_WINDOW = 1 << 18        # rowids per window of the largest GPU table


def no_frames() -> dict[str, Table]:
    """The row-level tables of a capture without CUDA trace: empty."""
    return {k: Table() for k in ROW_FRAMES}


def row_frames(cap: Export, stages: Stages) -> dict[str, Table]:
    """The row-level frames of a traced capture, placed with `stages` (the batches `analyze`
    kept): calls, transfers, kernels and gpu_busy, one row per event, in table order."""
    n_slots = len(stages.config.stages) + 2
    lookup, wanted = cu.kind_lut(cap)
    plan = gpu_plan(cap, keep=True)
    with cap.stream([*cu.call_queries(cap, wanted), *plan[0]]) as stream:
        calls, tally, _ = place_calls(stages, n_slots, lookup, stream, keep=True)
        *_, gpu_rows = gpu_pass(cap, stages, calls, tally, n_slots, plan, stream, keep=True)
    return frames_of(calls, gpu_rows)


@dataclass
class Calls:
    """What the GPU pass needs of each API call of interest, in call order (~11 bytes a call);
    with `rows` (keep mode) the calls' own columns too."""

    index: cu.CallIndex
    slot: np.ndarray        # int8/int16
    batch: np.ndarray       # int32
    kind: np.ndarray        # int8
    paired: np.ndarray      # bool: a kernel or memcpy row names this call
    rows: dict[str, np.ndarray] | None = None
    reversed: int = 0       # calls that end before they start


def call_pass(cap: Export, stages: Stages, n_slots: int, lookup, calls_q, stream, keep: bool = False):
    """Stream the API calls of interest: place them in stages, count them per slot and batch,
    and keep what pairing needs. Batches after the last CUDA record are dropped first
    (`stages.lost_tail`; its facts returned for the warning); the full-table scan that finds that
    record only runs when some batch starts after the last call of interest (then the calls are
    read again). Returns (stages, calls, tally, the lost tail's facts or None)."""
    calls, tally, last = place_calls(stages, n_slots, lookup, stream, keep)
    b_start = stages.batches["start"]
    facts = None
    if len(b_start) and (last is None or (b_start > last).any()):
        stages2, facts = lost_tail(stages, cu.last_api_end(cap))
        if stages2 is not stages:
            stages = stages2
            with cap.stream(calls_q) as again:
                calls, tally, _ = place_calls(stages, n_slots, lookup, again, keep)
    return stages, calls, tally, facts


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def place_calls(stages: Stages, n_slots: int, lookup, stream, keep: bool = False):
    """Consume the call windows at the head of `stream` (tag ("calls", i))."""
    placer = Placer(stages)
    tally = CudaTally(n_slots, len(stages.batches))
    index = cu.CallIndex()
    slot_t = np.int8 if n_slots < 128 else np.int16
    slots_, batches_, kinds_ = [], [], []
    kept: dict[str, list] = {k: [] for k in ("start", "end", "gtid", "corr")}
    last = None
    reversed_ = 0
    for tag, r in stream:
        if tag[0] != "calls":
            stream.push_back(tag, r)
            break
        kind = lookup(r["nameId"])
        slot, batch = placer(r["gtid"], r["start"], r["end"])
        tally.add_calls(kind, slot, batch)
        tally.add_syncs(lookup.sync(r["nameId"]), slot)
        index.add(r["corr"], r["gtid"] >> 24)
        reversed_ += int((r["end"] < r["start"]).sum())
        slots_.append(slot.astype(slot_t))
        batches_.append(batch.astype(np.int32))
        kinds_.append(kind)
        if keep:
            for k in kept:
                kept[k].append(r[k])
        if len(r["end"]):
            e = int(r["end"].max())
            last = e if last is None else max(last, e)
    index.freeze()
    kind = _cat(kinds_, np.int8)
    rows = {k: _cat(v, np.int64) for k, v in kept.items()} if keep else None
    calls = Calls(index, _cat(slots_, slot_t), _cat(batches_, np.int32), kind, np.zeros(len(kind), dtype=bool), rows,
                   reversed_)
    return calls, tally, last


def gpu_plan(cap: Export, keep: bool):
    """(the GPU table windows in reading order, which tables carry process ids)."""
    tables = [t for t in cu.GPU_TABLES if cap.has(t)]
    # the same number of windows for every table, so that they advance together in time
    spans = [r[1] - r[0] + 1 for r in (cap.rowid_range(t) for t in tables) if r is not None]
    parts = max(1, -(-max(spans) // GPU_WINDOW)) if spans else 1
    queries = {t: cu.gpu_queries(cap, t, parts, device=keep) for t in tables}
    # window i of n of each table, in order of (i + 1) / n
    order = sorted((q for qs in queries.values() for q in qs), key=lambda q: ((q.tag[1] + 1) / q.tag[2], q.tag[0]))
    pid = {t: cu.has_pid(cap, t) for t in tables if queries[t]}
    return order, pid


def gpu_pass(cap: Export, stages: Stages, calls: Calls, tally: CudaTally, n_slots: int, plan, stream,
              keep: bool = False):
    """Stream the GPU tables, interleaved so that they advance together in time: pair each
    row with its call, count it (per slot, and per batch and slot, into `tally`), and merge it
    into GPU busy time. Returns (busy ns per batch, busy ns of the work launched in stages,
    memcpy rows with no call, rows kept per table); each batch's own busy ns (the union of the
    staged work launched inside it) goes into `tally.batch["gpu_own_ns"]`.
    A table found out of start order makes it read them all again, holding the busy intervals.
    The busy ns per batch come with the union of the batch spans of each process and the busy ns
    in each of its intervals (`span_union`)."""
    order, pid = plan
    bounds = session_bounds(cap.duration_ns)
    try:
        return gpu_stream(stages, calls, tally, n_slots, stream, pid, ordered=True, keep=keep, bounds=bounds)
    except Unordered:
        stream.close()
        with cap.stream(order) as again:
            return gpu_stream(stages, calls, tally, n_slots, again, pid, ordered=False, keep=keep, bounds=bounds)


def session_bounds(duration_ns: int | None) -> tuple[int, int] | None:
    """Where a GPU record of the session can lie: from 0 to the session's end, give or take a
    tenth of it or 1 s (CUPTI records GPU work only while the session runs); None without a length."""
    if duration_ns is None:
        return None
    slack = max(1_000_000_000, duration_ns // 10)
    return -slack, duration_ns + slack


def gpu_stream(stages, calls: Calls, tally: CudaTally, n_slots: int, stream, pid, ordered: bool, keep: bool,
                bounds: tuple[int, int] | None = None):
    n_stages = n_slots - 2
    outside = n_slots - 1
    b = stages.batches
    if stages.replicas is not None:      # replica ranks' batches: their own GPU's overlap, counted apart
        b = Table.concat([b, stages.replicas.select(b.columns)])
    # after the batches (and the replicas'), the union of the batch spans of each process: its
    # coverage counts GPU time under concurrent batches once
    upk, us, ue = span_union(b["gtid"] >> 24, b["start"], b["end"])
    n_spans = len(b)
    busy = BusyStream(np.r_[b["gtid"] >> 24, upk], np.r_[b["start"], us], np.r_[b["end"], ue], list(pid), ordered,
                      n_batches=len(stages.batches))
    b = stages.batches
    gpu = CudaTally(n_slots, len(b))
    unpaired_memcpy = 0
    damage = {"reversed": 0, "duplicates": 0, "outside": 0, "bounds": bounds}
    calls.paired[:] = False                 # a second pass (out of order) starts over
    kept: dict[str, list[dict]] = {}
    for (table, i, n), r in stream:
        gpk = r["gpid"] >> 24
        call = calls.index.lookup(r["corr"], gpk if pid[table] else None)
        ok = call >= 0
        c = np.maximum(call, 0)

        def of_call(a, fill):
            return np.where(ok, a[c], fill) if len(a) else np.full(len(c), fill)

        slot = of_call(calls.slot, outside).astype(np.int64)
        batch = of_call(calls.batch, -1).astype(np.int64)
        api_kind = of_call(calls.kind, 0).astype(np.int8) if keep or table == cu.KERNEL else None
        if table == cu.MEMCPY:
            check_copies(r)
            gpu.add_copies(slot, batch, r["copyKind"], r["srcKind"], r["dstKind"], r["copies"], r["bytes"])
            unpaired_memcpy += int((~ok).sum())
            damage["duplicates"] += pair(calls.paired, call[ok])
        elif table == cu.KERNEL:
            gpu.add_kernels(slot, api_kind == cu.GRAPH)
            damage["duplicates"] += pair(calls.paired, call[ok & (api_kind == cu.LAUNCH)])
            calls.paired[call[ok]] = True
        elif table == cu.GRAPH_TRACE:
            gpu.add_graph_rows(slot)
        rev = r["end"] < r["start"]             # reversed, or no end (read as 0)
        damage["reversed"] += int(rev.sum())
        drop = rev
        if bounds is not None:
            away = ((r["start"] < bounds[0]) | (r["end"] > bounds[1])) & ~rev
            damage["outside"] += int(away.sum())
            drop = rev | away
        if drop.any():
            fine = ~drop
            busy.add(table, gpk[fine], r["start"][fine], r["end"][fine], (slot < n_stages + 1)[fine], batch[fine])
        else:
            busy.add(table, gpk, r["start"], r["end"], slot < n_stages + 1, batch)
        if i == n - 1:
            busy.done(table)
        if keep:
            kept.setdefault(table, []).append({**r, "call": call, "slot": slot, "batch": batch, "api_kind": api_kind})
    cov, own_ns, own_per_batch = busy.finish()
    gpu.batch["gpu_own_ns"] = own_per_batch
    unions = Table(pk=upk, start=us, end=ue, gpu_busy_ns=cov[n_spans:])
    cov = cov[:n_spans]
    if stages.replicas is not None:
        stages.replicas["gpu_busy_ns"] = cov[len(b):]
        cov = cov[:len(b)]
    for key, v in gpu.slot.items():
        tally.slot[key] += v
    for key, v in gpu.batch.items():
        tally.batch[key] += v
    return (cov, unions), own_ns, unpaired_memcpy, damage, (kept if keep else None)


MAX_COPY_BYTES = 1 << 40        # 1 TiB in one copy record: beyond it a value is damage, and sums could overflow
MAX_COPY_COUNT = 1 << 24


def check_copies(r: dict[str, np.ndarray]) -> None:
    """Refuse memcpy rows whose byte or copy counts are negative or beyond any real copy."""
    for col, top, label in (("bytes", MAX_COPY_BYTES, "bytes"), ("copies", MAX_COPY_COUNT, "copyCount")):
        bad = (r[col] < 0) | (r[col] > top)
        if bad.any():
            raise CaptureError(f"{int(bad.sum())} {cu.MEMCPY} rows have {label} outside 0..{top} (e.g. "
                               f"{int(r[col][bad][0])}): a damaged or edited export")


def pair(paired: np.ndarray, call: np.ndarray) -> int:
    """Mark `call` as paired with a GPU record; return how many records name a call already
    paired (a duplicated row: each memcpy call and kernel launch has exactly one)."""
    if len(call) == 0:
        return 0
    lo, hi = int(call.min()), int(call.max()) + 1
    if hi - lo > 4 * len(call) + 4096:     # calls far apart: sort them
        u = np.unique(call)
        dup = len(call) - len(u) + int(paired[u].sum())
        paired[u] = True
        return dup
    # a window's calls lie close together: count them over their range (no sort)
    seen = np.bincount(call - lo, minlength=hi - lo).astype(bool)
    dup = len(call) - int(seen.sum()) + int(paired[lo:hi][seen].sum())
    paired[lo:hi] |= seen
    return dup


def frames_of(calls: Calls, gpu_rows: dict[str, list[dict]]) -> dict[str, Table]:
    """The row-level tables from a keep-mode pass (columns and dtypes as they always were)."""
    from .window import row_tables

    r = calls.rows
    calls_t = Table(start=r["start"], end=r["end"], gtid=r["gtid"], corr=r["corr"], kind=calls.kind,
                    slot=calls.slot.astype(np.int64), batch=calls.batch.astype(np.int64))

    def table(name: str) -> Table:
        chunks = gpu_rows.get(name, [])
        cols = ["start", "end", "gpid", "corr", "device", *(n for n, _, _ in cu.GPU_TABLES[name])]
        t = Table({c: _cat([ch[c] for ch in chunks], np.int64) for c in cols})
        for c, dt in (("call", np.int64), ("slot", np.int64), ("batch", np.int64), ("api_kind", np.int8)):
            t[c] = _cat([ch[c] for ch in chunks], dt)
        return t

    return row_tables(calls_t, {t: table(t) for t in cu.GPU_TABLES})


def lost_records(slot: np.ndarray, kind: np.ndarray, paired: np.ndarray, outside_slot: int,
                 unpaired_memcpy: int, batches_after_cuda_end: int) -> LostRecords:
    """Counts of lost CUDA records: launches and copies in batches or stages with no GPU record,
    memcpy records with no API call, batches dropped because CUDA records stop before NVTX."""
    staged = slot < outside_slot
    return LostRecords(kernel_launches_without_gpu_record=int((staged & (kind == cu.LAUNCH) & ~paired).sum()),
                       memcpy_calls_without_gpu_record=int((staged & (kind == cu.COPY) & ~paired).sum()),
                       memcpy_records_without_call=int(unpaired_memcpy),
                       batches_after_cuda_end=int(batches_after_cuda_end))
