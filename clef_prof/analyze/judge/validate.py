"""Capture checks: each returns warning lines, so no figure is printed silently wrong."""
from __future__ import annotations

import numpy as np

from ..figures.arrays import distinct_pairs, unique
from ...base.errors import CaptureError
from ..read.export import NAME_CHARS, Export
from ..model import ThreadFacts
from ..read.nvtx import RANGE_TYPES, NvtxCensus, names_seen
from ...base.redact import process_name
from ..figures import cuda as cu
from ..figures.stages import Stages, lost_tail as figures_lost_tail

FIGURES_HIDDEN = "H2D, kernel and overlap figures are not shown"
# nsys 2022.4 writes no META_DATA_CAPTURE; its diagnostics (in StringIds) name what it traced
_DIAG_STARTED = "Profiling has started."
_DIAG_PREFIXES = {"cuda": ("CUDA profiling", "CUDA injection", "No CUDA events collected", "Number of CUDA events"),
                  "nvtx": ("NVTX profiling", "NVTX injection", "No NVTX events collected", "Number of NVTX events")}
NVTX_VERSION_HINT = ("nsys <= 2023.4 records nothing from Python `nvtx` >= 0.2.12 (it rejects the payload "
                     "extension, 'compatibility ID 260 != 259'): pip install 'nvtx==0.2.11', or annotate with "
                     "clef_prof.stage(), which every nsys records; `clef-prof doctor` checks this")


def trace_requested(cap: Export, kind: str) -> bool | None:
    """Whether the recording asked nsys to trace `kind` ("cuda" or "nvtx"): the export's
    COLLECT_CUDA_TRACE / COLLECT_NVTX_TRACE (nsys >= 2023), else the record manifest's `trace`,
    else nsys 2022.4's diagnostics; None when none of them says (a scrubbed or partial export)."""
    flag = cap.capture_flag(f"COLLECT_{kind.upper()}_TRACE")
    if flag is not None:
        return flag
    from ..read import manifest as mf

    found = mf.find_for(cap.path)
    if found is not None:
        try:
            trace = (mf.read(found).get("trace") or {}).get("trace")
        except (OSError, ValueError, AttributeError):
            trace = None
        if isinstance(trace, str):
            return kind in trace.split(",")
    if not cap.has("StringIds"):
        return None
    like = " OR ".join("value LIKE ?" for _ in _DIAG_PREFIXES[kind])
    if cap.rows(f"SELECT 1 FROM StringIds WHERE {like} LIMIT 1", tuple(p + "%" for p in _DIAG_PREFIXES[kind])):
        return True
    if cap.rows("SELECT 1 FROM StringIds WHERE value = ? LIMIT 1", (_DIAG_STARTED,)):
        return False
    return None


TIME_LIMIT = 1 << 62     # ns (146 years): beyond it no time of a capture lies, and end - start would leave int64


def impossible_times(cap: Export) -> None:
    """Refuse NVTX rows whose start or end lies beyond TIME_LIMIT: no capture holds them, and the
    durations made of them would wrap around int64 into figures of any sign."""
    cols = cap.columns("NVTX_EVENTS")
    ends = ['"end"'] if "end" in cols else []
    # integers only: text or a real in a time column is refused where it is read, naming the column
    cond = " OR ".join(f"(typeof({c}) = 'integer' AND ({c} < -{TIME_LIMIT} OR {c} > {TIME_LIMIT}))"
                       for c in ["start", *ends])
    n, first = cap.rows(f"SELECT count(*), min(rowid) FROM NVTX_EVENTS WHERE {cond}")[0]
    if n:
        rows = f"{n} NVTX_EVENTS rows hold" if n > 1 else "1 NVTX_EVENTS row holds"
        raise CaptureError(f"{rows} a start or end beyond {TIME_LIMIT:,} ns from the session's start (the first: "
                           f"rowid {first}): no capture holds such times; a damaged or edited export")


def threadless_ranges(cap: Export) -> list[str]:
    """A warning for NVTX ranges with no thread (globalTid NULL): nsys writes every range with its
    thread; without one a range belongs to no batch or stage and is left out, so counts are short."""
    n = cap.rows(f"SELECT count(*) FROM NVTX_EVENTS WHERE globalTid IS NULL AND eventType IN {RANGE_TYPES}")[0][0]
    return [f"{n} NVTX ranges have no thread (globalTid NULL): a damaged export; they are left out of every batch "
            "and stage, so counts may be short"] if n else []


def no_cuda(cap: Export) -> str:
    """The warning for a capture without CUDA rows: traced and unused, not traced, or unknown."""
    asked = trace_requested(cap, "cuda")
    if asked:
        return f"CUDA was traced but the program made no CUDA calls: {FIGURES_HIDDEN}"
    if asked is False:
        return f"CUDA was not traced (record with -t cuda,nvtx): {FIGURES_HIDDEN}"
    return (f"the capture has no CUDA rows and does not record whether CUDA was traced (could not tell): "
            f"{FIGURES_HIDDEN}; if it was not, record with -t cuda,nvtx")


def no_nvtx_table(cap: Export) -> str:
    """Why an export has no NVTX_EVENTS table: NVTX traced and unused, not traced, or unknown."""
    annotate = "annotate the stages (clef_prof.stage or `clef-prof inject`; see `clef-prof doctor`)"
    asked = trace_requested(cap, "nvtx")
    if asked:
        return f"NVTX was traced but the program emitted no NVTX (no NVTX_EVENTS table): {annotate}"
    if asked is False:
        return f"NVTX was not traced (no NVTX_EVENTS table): record with `nsys profile -t nvtx,...` and {annotate}"
    return ("no NVTX_EVENTS table, and the export does not record whether NVTX was traced (could not tell): "
            f"record with `nsys profile -t nvtx,...` and {annotate}")


def nvtx_presence(cap: Export, nv: NvtxCensus, stages: Stages) -> list[str]:
    cfg = stages.config
    if nv.ranges == 0 and not nv.user_domains and nv.marks == 0:
        return ["no NVTX at all: NVTX was traced but the capture has no user NVTX ranges, marks or domains; "
                "annotate the stages (clef_prof.stage or `clef-prof inject`)"]
    if nv.ranges == 0:
        doms = ", ".join(repr(d) for d in nv.user_domains) or "none"
        return [f"NVTX domains were created ({doms}) but no range was recorded. {NVTX_VERSION_HINT}"]
    if len(stages.batches) == 0 and len(stages.instances) == 0 and not stages.cut:
        seen = names_seen(cap)
        listing = ", ".join(f"{(d + ':') if d else ''}{n} ({c})" for d, n, c in seen) or "none"
        dom = f"domain {cfg.domain!r}" if cfg.domain else "the default domain"
        return [f"no range named {cfg.batch!r} or {', '.join(cfg.stages)} in {dom}; ranges seen "
                f"(domain:name (count)): {listing}; set --domain/--batch/--stages or --spec"]
    out = []
    if nv.orphans:
        who = ", ".join(f"pid {p}: {n:,}" for p, n in sorted(nv.orphans.items()))
        out.append(f"NVTX ranges in a domain their process never created ({who}), so they belong to no domain and "
                   "are not counted: a worker forked after its parent created the domain, which nsys traces "
                   "afresh, still uses the parent's handle. Create the domain again in each worker (clef-prof's "
                   "annotations do) or start workers with spawn")
    out += _replicas_without_ids(stages)
    if stages.duplicates:
        out.append(f"{stages.duplicates} NVTX ranges repeat another exactly (thread, start, end, name): duplicated "
                   "rows, counted once")
    if stages.reversed:
        out.append(f"{stages.reversed} NVTX ranges end before they start: damaged rows, excluded")
    if stages.crossing:
        out.append(f"{stages.crossing:,} stage ranges cross a {cfg.batch!r} range of their thread (one end inside it, "
                   "one outside: longer than the batch, or closed after it): counted outside every batch, their "
                   "time in no batch's figures")
    if len(stages.batches) == 0:
        out.append(f"no batch range {cfg.batch!r} found: stage instances are counted alone and the request "
                   "count is unknown unless --requests N is given")
    elif stages.requests_source is None and stages.requests_override is None:
        out.append(f"batch size not found in the {cfg.batch!r} ranges (no 'n=K' in the message, no integer payload): "
                   "per-request figures need --requests N")
    zero = int((stages.batches["size"] == 0).sum()) if stages.requests_source == "message n=K" else 0
    if zero:
        out.append(f"{zero} of {len(stages.batches)} {cfg.batch!r} ranges say n=0: batches without requests"
                   + ("; per-request figures cannot be computed" if zero == len(stages.batches) else
                      "; their host time and CUDA work count against the other batches' requests"))
    if len(stages.batches) and len(stages.instances) == 0:
        out.append(f"{len(stages.batches)} {cfg.batch!r} ranges but no stage range ({', '.join(cfg.stages)}) in them: "
                   "stage figures are empty; check --stages or the annotation")
    if stages.cut:
        out.append(cut_warning(stages.cut))
    if stages.cross_thread:
        out.append(f"{stages.cross_thread} ranges ended on another thread than they started on; their host span is "
                   "kept, CUDA calls are placed by the starting thread")
    present = np.bincount(stages.instances["code"], minlength=len(cfg.stages)) if len(stages.instances) else \
        np.zeros(len(cfg.stages), np.int64)
    missing = [s for i, s in enumerate(cfg.stages) if not present[i]]
    if missing:
        out.append(f"stages with no range in the capture: {', '.join(missing)}")
    return out


def _replicas_without_ids(stages: Stages) -> list[str]:
    """Replica ranks matched by batch size and time alone (analyze.figures.ranks): independent workers
    that run back-to-back batches of one size match that way too, and their requests would be
    missing from the count; request ids tell the two apart, so say which were judged without."""
    reps = stages.replicas
    if reps is None:
        return []
    # ids are compared only where both batches have one: a pair with a batch without (on either
    # side: the replica's batches are in `reps`, its first rank's in the counted batches) is
    # matched by size and time, at least in part
    b = stages.batches
    out = []
    for pk in np.unique(reps["gtid"] >> 24):
        mine = reps[(reps["gtid"] >> 24) == pk]
        lead = int(mine["lead"][0])
        theirs = b[(b["gtid"] >> 24) == lead]
        bare, lead_bare = int((mine["rid"] == "").sum()), int((theirs["rid"] == "").sum())
        if not bare and not lead_bare:
            continue
        out.append(f"pid {int(pk) & 0xFFFFFF} was taken for a replica rank of pid {lead & 0xFFFFFF} (the same "
                   f"batches, as with tensor parallelism) by batch sizes and times where request ids are missing "
                   f"({bare:,} of its {len(mine):,} batches and {lead_bare:,} of pid {lead & 0xFFFFFF}'s "
                   f"{len(theirs):,} have none). If they are independent workers, its {len(mine):,} batches "
                   f"({int(mine['size'].sum()):,} requests) are missing from the count; batch ranges with request "
                   "ids (clef_prof.batch(request_ids=...), `rid=` in the message) tell the two apart")
    return out


def cut_warning(cut: dict[str, int]) -> str:
    parts = ", ".join(f"{k}: {v}" for k, v in cut.items())
    return f"{sum(cut.values())} ranges cut at the capture edges were excluded ({parts})"


def lost_tail(stages: Stages, cuda_last_end: int | None) -> tuple[Stages, list[str]]:
    """Drop batches that start after the last CUDA record (`figures.stages.lost_tail`), and say so."""
    kept, facts = figures_lost_tail(stages, cuda_last_end)
    return kept, lost_tail_words(facts)


def lost_tail_words(facts: tuple[int, int, int] | None) -> list[str]:
    """The warning of `figures.stages.lost_tail`'s facts (none when nothing was lost)."""
    if facts is None:
        return []
    cuda_last_end, last_nvtx, dropped = facts
    return [f"CUDA records stop at {cuda_last_end / 1e9:.3f} s but NVTX goes on to {last_nvtx / 1e9:.3f} s: a lost or "
            f"killed capture; {dropped} batches ending after the last CUDA record were excluded"]


def stage_layout(stages: Stages) -> list[str]:
    """Stages spread over several threads or processes: handled per thread, and said."""
    inst = stages.instances
    if len(inst) == 0:
        return []
    gtids = unique(np.concatenate([inst["gtid"], stages.batches["gtid"]]))
    pids = unique(gtids >> 24)
    if len(gtids) <= 1:
        return []
    pairs = distinct_pairs(inst["code"].astype(np.int64), inst["gtid"])
    per_stage = np.bincount(pairs, minlength=len(stages.config.stages))
    spread = ", ".join(f"{s}: {n} threads" for s, n in zip(stages.config.stages, per_stage) if n > 1)
    return [f"stage ranges lie on {len(gtids)} threads in {len(pids)} processes"
            f"{' (' + spread + ')' if spread else ''}; CUDA work is attributed per thread"]


def thread_facts(cap: Export, stages: Stages, gtids: np.ndarray) -> list[ThreadFacts]:
    """pid, tid, process (its executable's base name) and thread names, and instances of each thread
    holding stage ranges (all of them, and those outside every batch range)."""
    if len(gtids) == 0:
        return []
    names = cap.strings
    tnames = {}
    # each process's main thread (tid = pid) too: it names a process launched through `env`
    mains = {int(g) >> 24 << 24: (int(g) >> 24 << 24) | ((int(g) >> 24) & 0xFFFFFF) for g in gtids}
    if cap.has("ThreadNames"):
        ids = ",".join(str(int(g)) for g in {*map(int, gtids), *mains.values()})
        for name_id, gtid in cap.rows(f"SELECT nameId, globalTid FROM ThreadNames WHERE globalTid IN ({ids})"):
            tnames[int(gtid)] = names.get(int(name_id), "")
    pnames = {}
    if cap.has("PROCESSES") and "globalPid" in cap.columns("PROCESSES"):
        pids = ",".join(str(int((g >> 24) << 24)) for g in gtids)
        for gpid, name in cap.rows(f"SELECT globalPid, substr(name, 1, {NAME_CHARS}) FROM PROCESSES "
                                   f"WHERE globalPid IN ({pids})"):
            pnames[int(gpid)] = process_name(name, tnames.get(mains.get(int(gpid))))
    inst, b = stages.instances, stages.batches
    stage_names = stages.config.stages

    def per_stage(codes: np.ndarray) -> dict[str, int]:
        n = np.bincount(codes, minlength=len(stage_names))
        return {s: int(n[i]) for i, s in enumerate(stage_names) if n[i]}

    out = []
    for g in gtids:         # once per thread holding stage ranges
        g = int(g)
        mine = inst[inst["gtid"] == g]
        out.append(ThreadFacts(pid=(g >> 24) & 0xFFFFFF, tid=g & 0xFFFFFF, process=pnames.get((g >> 24) << 24),
                               thread=tnames.get(g), batches=int((b["gtid"] == g).sum()),
                               stage_instances=per_stage(mine["code"]),
                               outside_batch_instances=per_stage(mine["code"][mine["batch"] < 0])))
    return out


def journey_damage(j) -> list[str]:
    """Warnings on request ranges and marks a damaged, merged or re-exported capture holds."""
    out = []
    if j.reversed:
        out.append(f"{j.reversed:,} request ranges end before they start (a negative duration): damaged rows, "
                   "in no journey figure (listed as reversed)")
    if j.duplicate_requests or j.duplicate_marks:
        out.append(f"{j.duplicate_requests:,} request ranges and {j.duplicate_marks:,} enqueue marks repeat another "
                   "exactly (thread, time, id): duplicated rows of a merged or re-exported trace, counted once")
    return out


def unpaired_calls(calls, n_slots: int, unpaired_memcpy: int) -> list[str]:
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


def damaged_rows(calls, damage: dict) -> list[str]:
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
