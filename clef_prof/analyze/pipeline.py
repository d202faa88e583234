"""`analyze`: one capture in, per-request stage metrics and validation warnings out.

Reading happens in `read/` (`export`, `nvtx`), the figures in `figures/`, the judging in `judge/`;
this module wires the steps together, in that order, and `assemble` builds the typed result
(`clef_prof.analyze.model.Result`, whose `to_json()` is the JSON contract documented in docs/json.md).

CUDA tables are streamed: the API calls, then the GPU activity tables, are read in rowid
windows on reader threads and reduced window by window (placed in stages, paired, counted,
merged into GPU busy time), so memory stays bounded by the window size plus about 11 bytes
per API call of interest, whatever the capture size. The row-level frames of an `Analysis`
(`calls`, `transfers`, `kernels`, `gpu_busy`) are not kept: they are read again from the
export the first time one is used (`analyze(..., rows=True)` reads them at once).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from .figures import cuda as cu
from . import assemble
from ..base import cupti
from ..base.config import thresholds
from .figures import ranks, samples
from .figures.attribute import Placer
from .read.export import Export
from .read.columns import Table
from ..base.errors import CaptureError, shown
from .figures.metrics import check_name_lengths, check_stage_names, CudaTally, per_batch_table
from .read.nvtx import census
from .read import kineto
from .figures.overlap import BusyStream, Unordered, span_union
from .figures.stages import StageConfig, Stages, build
from .judge import findings, validate
from .model import Result

ROW_FRAMES = ("calls", "transfers", "kernels", "gpu_busy")
GPU_WINDOW = 1 << 18        # rowids per window of the largest GPU table

if TYPE_CHECKING:
    import pandas as pd


class Analysis:
    """Everything `analyze` found: the typed `result` (`model.Result`; `result.to_json()` is the JSON
    contract) and the frames behind it.

    `result`, `stages` and `batch_table` are computed by `analyze` (NumPy columns; `per_batch` is
    that table as a pandas DataFrame, made when first used). The row-level tables, `rows(name)`,
    `calls` (one row per CUDA API call of interest), `transfers` (memcpy rows), `kernels`
    and `gpu_busy` (every GPU interval) hold a row per event, which does not fit in memory
    for multi-GB captures: they are read from the export when first used (the file must
    still be there), or at once with `analyze(..., rows=True)`; the properties of the same
    names give them as pandas DataFrames.
    """

    journeys: Table | None = None       # one row per request range (analyze.figures.journey), when there are any
    sample_counts: "samples.StackCounts | None" = None    # Python samples per (stage, stack), when there are any

    def __init__(self, path: str, config: StageConfig, result: Result, stages: Stages,
                 batch_table: Table | None = None, traced: bool = True):
        self.path = path
        self.config = config
        self.result = result
        self.stages = stages
        self.batch_table = batch_table
        self._per_batch = None
        self._pd: dict = {}                 # the row-level tables as pandas frames, once asked for
        self._traced = traced
        self._frames: dict[str, Table] | None = None

    def __repr__(self) -> str:
        return f"Analysis(path={self.path!r}, config={self.config!r}, requests={self.result.requests!r})"

    @property
    def warnings(self) -> list[str]:
        return self.result.warnings

    @property
    def per_batch(self) -> "pd.DataFrame | None":
        """`batch_table` as a pandas DataFrame (one row per batch)."""
        if self._per_batch is None and self.batch_table is not None:
            self._per_batch = self.batch_table.frame()
        return self._per_batch

    @property
    def rows_loaded(self) -> bool:
        return self._frames is not None

    def load_rows(self) -> "Analysis":
        """Read the row-level tables now (from `path`); a no-op once they are loaded."""
        if self._frames is None:
            if not self._traced:
                self._frames = _no_frames()
            else:
                with Export.open(self.path) as cap:
                    self._frames = row_frames(cap, self.stages)
        return self

    def rows(self, name: str) -> Table:
        """One row-level table (`calls`, `transfers`, `kernels`, `gpu_busy`) as NumPy columns."""
        return self.load_rows()._frames[name]

    def window(self, t0: int, t1: int, pks=None) -> dict[str, Table]:
        """The row-level tables of the rows that overlap [t0, t1] ns, of the processes `pks`
        (`gtid >> 24` keys; None: all), filtered in SQL (`window.window_rows`): a few batches'
        rows without reading every row of the capture."""
        if not self._traced:
            return _no_frames()
        from .figures.window import window_rows

        with Export.open(self.path) as cap:
            return window_rows(cap, self.stages, t0, t1, pks)

    def _frame(self, name: str) -> "pd.DataFrame":
        if name not in self._pd:
            self._pd[name] = self.rows(name).frame()
        return self._pd[name]

    @property
    def calls(self) -> "pd.DataFrame":
        return self._frame("calls")

    @property
    def transfers(self) -> "pd.DataFrame":
        return self._frame("transfers")

    @property
    def kernels(self) -> "pd.DataFrame":
        return self._frame("kernels")

    @property
    def gpu_busy(self) -> "pd.DataFrame":
        return self._frame("gpu_busy")


def analyze(path: str, config: StageConfig = StageConfig(), requests: int | None = None,
            on_step: Callable[[str], None] | None = None, rows: bool = False) -> Analysis:
    """Analyze one export. `rows=True` also keeps the row-level frames, from the same read
    (for notebooks and comparisons that use them: one pass instead of two)."""
    step = on_step or (lambda _s: None)
    if requests is not None and requests <= 0:
        raise CaptureError(f"--requests must be a positive number of requests, not {requests}")
    check_stage_names(tuple(config.stages))
    check_name_lengths(config)
    with Export.open(path) as cap:
        step("schema")
        if not cap.has("NVTX_EVENTS"):
            if not cap.tables:
                raise CaptureError(f"{shown(path)}: an empty SQLite database, not an nsys export")
            if not (cap.export_meta or cap.has("StringIds")):
                raise CaptureError(f"{shown(path)}: not an Nsight Systems export (no NVTX_EVENTS, StringIds or export metadata)")
            raise CaptureError(f"{shown(path)}: {validate.no_nvtx_table(cap)}")
        cap.require("NVTX_EVENTS", ("start", "end", "eventType", "globalTid", "domainId"), "NVTX ranges need them")
        try:
            validate.impossible_times(cap)
            analysis = _analyze(cap, config, requests, step, rows)
        except CaptureError as exc:
            if str(exc).startswith(shown(path)):
                raise
            raise CaptureError(f"{shown(path)}: {exc}") from None
    source = analysis.result.capture.source
    if source is not None and source.get("path"):
        analysis.result.path = source["path"]       # the trace the user named, not its converted file
    _check_manifest(analysis)
    return analysis


def _check_manifest(analysis: Analysis) -> None:
    """Hold the capture against the `clef-prof record` manifest beside it, when there is one."""
    from .judge import manifest as held
    from .read import manifest as mf

    found = mf.find_for(analysis.result.path)
    if found is None:
        return
    r = analysis.result
    client = r.journey.client if r.journey is not None else None
    try:
        manifest = mf.read(found)
        warnings = held.check_manifest(r, manifest)
        if r.journey is not None:
            r.journey.client, more = held.client_check(r, manifest)
            warnings += more
        by_record = mf.window_by_record(manifest)
    except (OSError, ValueError) as exc:
        by_record, warnings = False, [f"the manifest beside the export cannot be read ({exc})"]
    except (TypeError, AttributeError, KeyError, OverflowError) as exc:     # a value of another type
        if r.journey is not None:
            r.journey.client = client
        by_record, warnings = False, [f"the manifest beside the export is not one record wrote ({type(exc).__name__}: "
                                      f"{exc}): not used"]
    r.manifest = found
    r.warnings.extend(warnings)
    if by_record and analysis.stages.cut:
        # record opened and closed the window: ranges cut at its edges are expected, neither a
        # warning nor a finding (their count stays in `excluded.cut_at_edges`)
        r.window_by_record = True
        r.warnings.remove(validate.cut_warning(analysis.stages.cut))
        r.findings = findings.evaluate(r, r.findings_thresholds)


def _analyze(cap: Export, config: StageConfig, requests: int | None, step, keep: bool = False) -> Analysis:
    warnings: list[str] = kineto.warnings_of(cap) + validate.threadless_ranges(cap)
    traced = cu.cuda_traced(cap)
    n_slots = len(config.stages) + 2
    stream = plan = None
    if traced:
        cu.check_schema(cap)
        # start reading the CUDA tables on the reader threads now, while NVTX is read here
        lookup, wanted = cu.kind_lut(cap)
        calls_q = cu.call_queries(cap, wanted)
        plan = _gpu_plan(cap, keep)
        stream = cap.stream([*calls_q, *plan[0]])
    try:
        step("nvtx")
        nv = census(cap)
        stages = ranks.fold(build(cap, config, requests))
        warnings += validate.nvtx_presence(cap, nv, stages)
        mode = cu.graph_trace_mode(cap)
        tally = cov = unions = own_ns = frames = lost = None
        if traced:
            if kineto.source_facts(cap) is None:       # nsys' CUPTI against the driver: not a torch trace's
                warnings += cupti.check(cap.nsys_version, cap.cuda_driver_version)
            step("cuda api")
            n_batches = len(stages.batches)
            stages, calls, tally, w = _call_pass(cap, stages, n_slots, lookup, calls_q, stream, keep)
            warnings += w
            step("gpu activity")
            (cov, unions), own_ns, unpaired_memcpy, gpu_damage, gpu_rows = _gpu_pass(cap, stages, calls, tally, n_slots,
                                                                                      plan, stream, keep)
            warnings += _unpaired(calls, n_slots, unpaired_memcpy) + _damaged(calls, gpu_damage)
            lost = findings.lost_records(calls.slot, calls.kind, calls.paired, n_slots - 1, unpaired_memcpy,
                                         n_batches - len(stages.batches))
            if keep:
                frames = _frames(calls, gpu_rows)
        else:
            warnings.append(validate.no_cuda(cap))
            if keep:
                frames = _no_frames()
    finally:
        if stream is not None:
            stream.close()

    step("metrics")
    warnings += validate.stage_layout(stages)
    if stages.nested:
        warnings.append(f"{stages.nested} {config.batch!r} batch ranges lie inside another batch range of their thread "
                        "(an annotation and an injected spec on one function, or a batch target calling another): "
                        "each batch counted once, as its outermost range")
    table = per_batch_table(stages, tally.batch if traced else None, cov)
    result = assemble.result(cap, stages, tally.counts() if traced else None, own_ns, cov, traced, mode, warnings, table,
                     lost, unions)
    step("journeys")
    journey_rows, result.journey = _journeys(cap, stages, table)
    j = result.journey
    if j is not None:
        result.warnings += _journey_damage(j)
    if j is not None and config.engine_id_pattern and j.batch_ids and not j.renamed_batch_ids:
        result.warnings.append(f"the engine id pattern {config.engine_id_pattern!r} matched none of the {j.batch_ids:,} "
                        "batch ids: requests and batches meet only where the ids are equal")
    step("samples")
    sample_counts = samples.count(cap, stages)
    result.samples, more = samples.figures(sample_counts, result.requests)
    result.warnings += more
    if result.samples is None:
        sample_counts = None        # nsys' Python samples present but unreadable: said in a warning
    th = thresholds(config.findings)
    result.findings_thresholds = th
    result.findings = findings.evaluate(result, th)
    out = Analysis(cap.path, config, result, stages, batch_table=table, traced=traced)
    out._frames = frames
    out.journeys = journey_rows
    out.sample_counts = sample_counts
    return out


def _journey_damage(j) -> list[str]:
    """Warnings on request ranges and marks a damaged, merged or re-exported capture holds."""
    out = []
    if j.reversed:
        out.append(f"{j.reversed:,} request ranges end before they start (a negative duration): damaged rows, "
                   "in no journey figure (listed as reversed)")
    if j.duplicate_requests or j.duplicate_marks:
        out.append(f"{j.duplicate_requests:,} request ranges and {j.duplicate_marks:,} enqueue marks repeat another "
                   "exactly (thread, time, id): duplicated rows of a merged or re-exported trace, counted once")
    return out


def _journeys(cap: Export, stages: Stages, table: Table):
    """(one row per request range, the typed journey part) when the capture holds request ranges;
    (None, None) otherwise. The encode of a journey is an `encode` stage outside every batch."""
    from .figures import journey as jn

    inst = stages.instances
    enc = inst[(inst["stage"] == jn.ENCODE) & (inst["batch"] < 0)] if len(inst) else inst
    encodes = Table(start=enc["start"], end=enc["end"], gtid=enc["gtid"]) if len(enc) else Table(
        start=np.zeros(0, np.int64), end=np.zeros(0, np.int64), gtid=np.zeros(0, np.int64))
    inp = jn.read(cap, stages.config.domain, stages.config.batch, stages.batches, encodes,
                  stages.config.engine_id_pattern, stages.replicas)
    if inp is None:
        return None, None
    rows, meta = jn.journeys(inp)
    stage_ns = {name: table[f"{name}_ns"] for name in stages.config.stages}
    return rows, jn.figures(rows, meta, stage_ns)


def _no_frames() -> dict[str, Table]:
    """The row-level tables of a capture without CUDA trace: empty."""
    return {k: Table() for k in ROW_FRAMES}


def row_frames(cap: Export, stages: Stages) -> dict[str, Table]:
    """The row-level frames of a traced capture, placed with `stages` (the batches `analyze`
    kept): calls, transfers, kernels and gpu_busy, one row per event, in table order."""
    n_slots = len(stages.config.stages) + 2
    lookup, wanted = cu.kind_lut(cap)
    plan = _gpu_plan(cap, keep=True)
    with cap.stream([*cu.call_queries(cap, wanted), *plan[0]]) as stream:
        calls, tally, _ = _place_calls(stages, n_slots, lookup, stream, keep=True)
        *_, gpu_rows = _gpu_pass(cap, stages, calls, tally, n_slots, plan, stream, keep=True)
    return _frames(calls, gpu_rows)


@dataclass
class _Calls:
    """What the GPU pass needs of each API call of interest, in call order (~11 bytes a call);
    with `rows` (keep mode) the calls' own columns too."""

    index: cu.CallIndex
    slot: np.ndarray        # int8/int16
    batch: np.ndarray       # int32
    kind: np.ndarray        # int8
    paired: np.ndarray      # bool: a kernel or memcpy row names this call
    rows: dict[str, np.ndarray] | None = None
    reversed: int = 0       # calls that end before they start


def _call_pass(cap: Export, stages: Stages, n_slots: int, lookup, calls_q, stream, keep: bool = False):
    """Stream the API calls of interest: place them in stages, count them per slot and batch,
    and keep what pairing needs. Batches after the last CUDA record are dropped first
    (`validate.lost_tail`); the full-table scan that finds that record only runs when some
    batch starts after the last call of interest (then the calls are read again)."""
    calls, tally, last = _place_calls(stages, n_slots, lookup, stream, keep)
    b_start = stages.batches["start"]
    warnings: list[str] = []
    if len(b_start) and (last is None or (b_start > last).any()):
        stages2, warnings = validate.lost_tail(stages, cu.last_api_end(cap))
        if stages2 is not stages:
            stages = stages2
            with cap.stream(calls_q) as again:
                calls, tally, _ = _place_calls(stages, n_slots, lookup, again, keep)
    return stages, calls, tally, warnings


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def _place_calls(stages: Stages, n_slots: int, lookup, stream, keep: bool = False):
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
    calls = _Calls(index, _cat(slots_, slot_t), _cat(batches_, np.int32), kind, np.zeros(len(kind), dtype=bool), rows,
                   reversed_)
    return calls, tally, last


def _gpu_plan(cap: Export, keep: bool):
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


def _gpu_pass(cap: Export, stages: Stages, calls: _Calls, tally: CudaTally, n_slots: int, plan, stream,
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
        return _gpu_stream(stages, calls, tally, n_slots, stream, pid, ordered=True, keep=keep, bounds=bounds)
    except Unordered:
        stream.close()
        with cap.stream(order) as again:
            return _gpu_stream(stages, calls, tally, n_slots, again, pid, ordered=False, keep=keep, bounds=bounds)


def session_bounds(duration_ns: int | None) -> tuple[int, int] | None:
    """Where a GPU record of the session can lie: from 0 to the session's end, give or take a
    tenth of it or 1 s (CUPTI records GPU work only while the session runs); None without a length."""
    if duration_ns is None:
        return None
    slack = max(1_000_000_000, duration_ns // 10)
    return -slack, duration_ns + slack


def _gpu_stream(stages, calls: _Calls, tally: CudaTally, n_slots: int, stream, pid, ordered: bool, keep: bool,
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
            _check_copies(r)
            gpu.add_copies(slot, batch, r["copyKind"], r["srcKind"], r["dstKind"], r["copies"], r["bytes"])
            unpaired_memcpy += int((~ok).sum())
            damage["duplicates"] += _pair(calls.paired, call[ok])
        elif table == cu.KERNEL:
            gpu.add_kernels(slot, api_kind == cu.GRAPH)
            damage["duplicates"] += _pair(calls.paired, call[ok & (api_kind == cu.LAUNCH)])
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


def _check_copies(r: dict[str, np.ndarray]) -> None:
    """Refuse memcpy rows whose byte or copy counts are negative or beyond any real copy."""
    for col, top, label in (("bytes", MAX_COPY_BYTES, "bytes"), ("copies", MAX_COPY_COUNT, "copyCount")):
        bad = (r[col] < 0) | (r[col] > top)
        if bad.any():
            raise CaptureError(f"{int(bad.sum())} {cu.MEMCPY} rows have {label} outside 0..{top} (e.g. "
                               f"{int(r[col][bad][0])}): a damaged or edited export")


def _pair(paired: np.ndarray, call: np.ndarray) -> int:
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


def _frames(calls: _Calls, gpu_rows: dict[str, list[dict]]) -> dict[str, Table]:
    """The row-level tables from a keep-mode pass (columns and dtypes as they always were)."""
    from .figures.window import row_tables

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


def _unpaired(calls: _Calls, n_slots: int, unpaired_memcpy: int) -> list[str]:
    """Launches and copies in stages whose GPU record is missing: lost CUPTI records
    (counted from the streamed pairing)."""
    out = []
    if len(calls.slot) == 0:
        return out
    staged = calls.slot < n_slots - 1         # in a stage, or in a batch outside every stage
    for kind, label in ((cu.LAUNCH, "kernel launches"), (cu.COPY, "memcpy calls")):
        sel = staged & (calls.kind == kind)
        total = int(sel.sum())
        if total == 0:
            continue
        missing = int((sel & ~calls.paired).sum())
        if missing:
            out.append(f"{missing} of {total} {label} in the pooler have no GPU record: CUDA records were lost "
                       "or the capture stopped early")
    if unpaired_memcpy:
        out.append(f"{unpaired_memcpy} memcpy records have no launching API call in the capture; "
                   "they count in totals, outside every stage")
    return out


def _damaged(calls: _Calls, damage: dict) -> list[str]:
    """Rows no real capture holds: reversed or endless intervals, duplicated GPU records."""
    out = []
    if calls.reversed:
        out.append(f"{calls.reversed} CUDA API calls end before they start (or have no end): a damaged export; "
                   "they are placed in stages by their start")
    if damage["reversed"]:
        out.append(f"{damage['reversed']} GPU activity records end before they start (or have no end): a damaged "
                   "export; they are left out of GPU busy time")
    if damage["outside"]:
        lo, hi = damage["bounds"]
        out.append(f"{damage['outside']} GPU activity records lie outside the capture session (they start before "
                   f"{lo / 1e9:g} s or end after {hi / 1e9:g} s, where CUPTI records none): a damaged export; they are "
                   "left out of GPU busy time")
    if damage["duplicates"]:
        out.append(f"{damage['duplicates']} memcpy or kernel records repeat the (process, correlationId) of another: "
                   "duplicated rows, counted in the copy and kernel figures")
    return out
