"""`analyze`: one capture in, per-request stage metrics and validation warnings out.

Reading happens in `read/` (`export`, `nvtx`), the figures in `figures/` (the CUDA passes in
`figures/cuda_pass`), then `assemble` builds the typed result, then `judge/` judges it; this module
wires the steps together, in that order, once each. The typed result is
`clef_prof.analyze.model.Result`, whose `to_json()` is the JSON contract documented in docs/json.md.

CUDA tables are streamed: the API calls, then the GPU activity tables, are read in rowid
windows on reader threads and reduced window by window (placed in stages, paired, counted,
merged into GPU busy time), so memory stays bounded by the window size plus about 11 bytes
per API call of interest, whatever the capture size. The row-level frames of an `Analysis`
(`calls`, `transfers`, `kernels`, `gpu_busy`) are not kept: they are read again from the
export the first time one is used (`analyze(..., rows=True)` reads them at once).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from . import assemble
from ..base import cupti
from ..base.config import thresholds
from ..base.errors import CaptureError, shown
from .figures import cuda as cu
from .figures import ranks, samples
from .figures.cuda_pass import call_pass, frames_of, gpu_pass, gpu_plan, lost_records, no_frames, row_frames
from .figures.metrics import check_name_lengths, check_stage_names, per_batch_table
from .figures.stages import StageConfig, Stages, build
from .judge import findings, validate
from .model import Result
from .read import kineto
from .read.columns import Table
from .read.export import Export
from .read.nvtx import census


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
                self._frames = no_frames()
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
            return no_frames()
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
    """One capture down the rooms in order: `read/` (the tables, streamed), `figures/` (stages,
    the CUDA passes, the per-batch table, journeys, samples), `assemble` (the typed result), then
    `judge/` (the warnings, in one list, and the findings)."""
    traced = cu.cuda_traced(cap)
    n_slots = len(config.stages) + 2
    stream = plan = None
    if traced:
        cu.check_schema(cap)
        # start reading the CUDA tables on the reader threads now, while NVTX is read here
        lookup, wanted = cu.kind_lut(cap)
        calls_q = cu.call_queries(cap, wanted)
        plan = gpu_plan(cap, keep)
        stream = cap.stream([*calls_q, *plan[0]])
    calls = tally = cov = unions = own_ns = frames = lost = tail = gpu_damage = None
    unpaired_memcpy = 0
    try:
        step("nvtx")
        nv = census(cap)
        stages = first = ranks.fold(build(cap, config, requests))
        mode = cu.graph_trace_mode(cap)
        if traced:
            step("cuda api")
            stages, calls, tally, tail = call_pass(cap, stages, n_slots, lookup, calls_q, stream, keep)
            step("gpu activity")
            (cov, unions), own_ns, unpaired_memcpy, gpu_damage, gpu_rows = gpu_pass(cap, stages, calls, tally, n_slots,
                                                                                      plan, stream, keep)
            lost = lost_records(calls.slot, calls.kind, calls.paired, n_slots - 1, unpaired_memcpy,
                                len(first.batches) - len(stages.batches))
            if keep:
                frames = frames_of(calls, gpu_rows)
        elif keep:
            frames = no_frames()
    finally:
        if stream is not None:
            stream.close()

    step("metrics")
    table = per_batch_table(stages, tally.batch if traced else None, cov)
    step("journeys")
    journey_rows, journey = _journeys(cap, stages, table)
    step("samples")
    sample_counts = samples.count(cap, stages)
    requests_n = stages.requests
    sampled, sample_words = samples.figures(sample_counts, requests_n)

    result = assemble.result(cap, stages, tally.counts() if traced else None, own_ns, cov, traced, mode, [], table,
                             lost, unions)
    result.journey, result.samples = journey, sampled
    if result.samples is None:
        sample_counts = None        # nsys' Python samples present but unreadable: said in a warning

    result.warnings = _judge(cap, config, nv, first, stages, traced, calls, n_slots, unpaired_memcpy, gpu_damage, tail,
                             journey) + sample_words
    th = thresholds(config.findings)
    result.findings_thresholds = th
    result.findings = findings.evaluate(result, th)
    out = Analysis(cap.path, config, result, stages, batch_table=table, traced=traced)
    out._frames = frames
    out.journeys = journey_rows
    out.sample_counts = sample_counts
    return out


def _judge(cap: Export, config: StageConfig, nv, first: Stages, stages: Stages, traced: bool, calls, n_slots: int,
           unpaired_memcpy: int, gpu_damage, tail, journey) -> list[str]:
    """The capture's warnings, in one list in the order a reader meets their causes: the input,
    NVTX (over the stages as read, before the lost tail was dropped), CUDA, the stages' layout,
    the journeys."""
    warnings: list[str] = kineto.warnings_of(cap) + validate.threadless_ranges(cap)
    warnings += validate.nvtx_presence(cap, nv, first)
    if traced:
        if kineto.source_facts(cap) is None:       # nsys' CUPTI against the driver: not a torch trace's
            warnings += cupti.check(cap.nsys_version, cap.cuda_driver_version)
        warnings += validate.lost_tail_words(tail)
        warnings += validate.unpaired_calls(calls, n_slots, unpaired_memcpy) + validate.damaged_rows(calls, gpu_damage)
    else:
        warnings.append(validate.no_cuda(cap))
    warnings += validate.stage_layout(stages)
    if stages.nested:
        warnings.append(f"{stages.nested} {config.batch!r} batch ranges lie inside another batch range of their thread "
                        "(an annotation and an injected spec on one function, or a batch target calling another): "
                        "each batch counted once, as its outermost range")
    if journey is not None:
        warnings += validate.journey_damage(journey)
        if config.engine_id_pattern and journey.batch_ids and not journey.renamed_batch_ids:
            warnings.append(f"the engine id pattern {config.engine_id_pattern!r} matched none of the "
                            f"{journey.batch_ids:,} batch ids: requests and batches meet only where the ids are equal")
    return warnings


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
