"""Findings: what is wrong in each stage and in the batch range, with the evidence and the fix.

Every rule reads analyze's own figures (the typed `Result`, whose stage shares come from the
per-batch table) and nothing else, so `evaluate(result)` can run again on a result with other thresholds,
and `compare` can hold a finding of one arm against the same figure of another. A rule fires only
where its figure exists and crosses its threshold: CUDA rules never fire on a capture without CUDA
trace. Thresholds (`clef_prof.base.config.THRESHOLDS`) are overridden by a `[findings]` table in the stage spec or by
`--threshold KEY=VALUE`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...base.config import thresholds
from ..model import BatchShare, Finding, Result
from ..figures.arrays import percentile

SEVERITIES = ("high", "medium", "low", "info")
BATCH_SCOPE = "(batch)"
CAPTURE_SCOPE = "(capture)"
OUTSIDE_SCOPE = "(outside stages)"


# ---------------------------------------------------------------------------------------------
# figures the rules need that analyze's tables do not hold: stage shares, lost records


def stage_shares(stage_ns: np.ndarray, batch_ns: np.ndarray) -> BatchShare:
    """A stage's host time as % of its batch's host span, per batch: mean, p50, p99 (%)."""
    ok = batch_ns > 0
    if not ok.any():
        return BatchShare()
    pct = 100.0 * stage_ns[ok] / batch_ns[ok]
    return BatchShare(float(pct.mean()), percentile(pct, 50), percentile(pct, 99))


# ---------------------------------------------------------------------------------------------
# the rules


def _per(n, d):
    return None if n is None or not d else n / d


@dataclass(frozen=True)
class Rule:
    """`evidence(result, scope, th)` gives the figures (None: absent, the rule cannot apply);
    `severity(ev, th)` says whether it fires; `key` is the evidence figure compare shows."""

    id: str
    scope: str                 # "stage", "batch", "outside" or "capture"
    title: str
    key: str
    unit: str
    evidence: Callable[[Result, str, dict], dict | None]
    severity: Callable[[dict, dict], str | None]
    text: Callable[[dict, str], tuple[str, str, str]]     # (summary, advice, expected)


def _cuda(r: Result) -> bool:
    return bool(r.capture.cuda_traced) and bool(r.requests)


def _ev_pageable(r: Result, s, th):
    b = r.stages[s].cuda
    if not _cuda(r) or b.h2d_copies is None:
        return None
    req = r.requests
    return {"pageable_copies_per_request": b.h2d_pageable / req, "pageable_copies": b.h2d_pageable,
            "h2d_copies": b.h2d_copies, "requests": req,
            "pageable_pct_of_h2d_copies": _per(100.0 * b.h2d_pageable, b.h2d_copies),
            "h2d_bytes_per_request": b.h2d_bytes / req}


def _sev_pageable(ev, th):
    v = ev["pageable_copies_per_request"]
    if not v or v < th["pageable_min_per_request"]:
        return None
    return "high" if v >= 1 else "medium"


def _tx_pageable(ev, s):
    v = ev["pageable_copies_per_request"]
    return (f"{v:.2f} pageable H2D copies per request ({ev['pageable_copies']:,} of {ev['h2d_copies']:,} H2D copies "
            f"over {ev['requests']:,} requests, {ev['pageable_pct_of_h2d_copies']:.0f}% pageable) in {s}",
            "build the host tensors in pinned memory (a reused pinned staging buffer, or tensor.pin_memory()) and "
            "copy with non_blocking=True",
            f"{v:.2f} → 0 pageable copies per request: no staging copy through the driver's bounce buffer, and "
            "copies that no longer hold the host until they are done")


def _ev_pack(r: Result, s, th):
    b = r.stages[s].cuda
    if not _cuda(r) or b.h2d_copies is None:
        return None
    req = r.requests
    batches = r.stages[s].instances or r.batches
    return {"h2d_copies_per_request": b.h2d_copies / req, "h2d_copies": b.h2d_copies, "requests": req,
            "bytes_per_copy": _per(b.h2d_bytes, b.h2d_copies), "h2d_bytes_per_request": b.h2d_bytes / req,
            "batches": batches, "copies_per_request_if_packed": _per(batches, req)}


def _sev_pack(ev, th):
    c = ev["h2d_copies_per_request"]
    if c < th["pack_min_copies_per_request"] or ev["bytes_per_copy"] is None:
        return None
    return "medium" if ev["bytes_per_copy"] <= th["pack_max_bytes_per_copy"] else None


def _tx_pack(ev, s):
    c, left = ev["h2d_copies_per_request"], ev["copies_per_request_if_packed"]
    return (f"{c:.2f} H2D copies per request of {ev['bytes_per_copy']:,.0f} B on average ({ev['h2d_copies']:,} copies "
            f"over {ev['requests']:,} requests) in {s}",
            "pack them into one contiguous host buffer per batch (NumPy/torch.cat into pinned memory), copy it once, "
            "and split it on the device with views",
            f"{c:.2f} → {left:.2f} H2D copies per request (1 per batch over {ev['batches']:,} batches; 1.00 if packed "
            f"per request), {ev['h2d_bytes_per_request']:,.0f} B per request unchanged")


def _ev_sync(r: Result, s, th):
    """Waits for the GPU in a stage: synchronize calls, synchronous memcpy calls and D2H readbacks.
    A readback is a wait whether its copy blocks (pageable memory, cudaMemcpy) or a synchronize
    follows it (pinned memory): the calls cannot be paired from counts, so the stage waits at
    least max(synchronizing calls, D2H copies) times."""
    st = r.stages[s]
    b = st.cuda
    if not _cuda(r) or b.sync_calls is None or not st.instances:
        return None
    req = r.requests
    calls = b.sync_calls + (b.sync_memcpy_calls or 0)
    n = max(calls, b.d2h_copies or 0)
    return {"syncs_per_request": n / req, "syncs_per_batch": n / st.instances, "syncs": n, "requests": req,
            "batches": st.instances, "stream_or_event_syncs": b.sync_calls - (b.device_syncs or 0),
            "device_syncs": b.device_syncs, "synchronous_memcpy_calls": b.sync_memcpy_calls,
            "synchronizing_calls": calls, "d2h_readbacks": b.d2h_copies, "d2h_bytes": b.d2h_bytes}


def _sev_sync(ev, th):
    if ev["syncs"] == 0 or ev["syncs_per_batch"] <= th["sync_max_per_batch"]:
        return None
    return "high" if ev["syncs_per_request"] >= 1 else "medium"


def _tx_sync(ev, s):
    parts = [f"{ev[k]:,} {label}" for k, label in (("stream_or_event_syncs", "stream/event synchronize"),
                                                  ("device_syncs", "device synchronize"),
                                                  ("synchronous_memcpy_calls", "synchronous memcpy")) if ev[k]]
    if ev["d2h_readbacks"]:
        parts.append(f"{ev['d2h_readbacks']:,} D2H readbacks of {ev['d2h_bytes'] / ev['d2h_readbacks']:,.0f} B "
                     "on average")
    return (f"{ev['syncs_per_request']:.2f} waits for the GPU per request ({ev['syncs_per_batch']:.2f} per batch; "
            f"{', '.join(parts)} over {ev['requests']:,} requests) in {s}",
            f"stop waiting for the GPU inside {s}: no .item()/.cpu()/synchronize per item; pinned non_blocking copies, "
            "and one readback per batch at its end",
            f"{ev['syncs_per_request']:.2f} → at most {1 / max(ev['requests'] / ev['batches'], 1):.2f} per request "
            f"(one per batch); the host no longer idles while the GPU drains in {s}")


def _ev_graph(r: Result, s, th):
    b = r.stages[s].cuda
    if not _cuda(r) or b.kernel_launches is None:
        return None
    req = r.requests
    return {"kernel_launches_per_request": b.kernel_launches / req, "kernel_launches": b.kernel_launches,
            "graph_launches_per_request": b.graph_launches / req, "requests": req}


def _sev_graph(ev, th):
    if ev["graph_launches_per_request"] == 0 and ev["kernel_launches_per_request"] >= th["graph_min_launches_per_request"]:
        return "medium"
    return None


def _tx_graph(ev, s):
    k = ev["kernel_launches_per_request"]
    return (f"{k:.2f} kernel launches per request ({ev['kernel_launches']:,} over {ev['requests']:,} requests) and no "
            f"graph launch in {s}",
            "capture the stage's kernels once in a CUDA graph (torch.cuda.CUDAGraph, or torch.compile "
            "mode='reduce-overhead') and replay it",
            f"{k:.2f} → 1 graph launch per request (or per batch shape): the per-launch host cost is paid once at capture")


def _dominant(r: Result) -> tuple[str | None, float | None]:
    """The stage with the largest mean share of the batch span; none when no stage has any time
    (a stage named but never recorded is no place to look)."""
    shares = [(b.share.mean_pct, n) for n, b in r.stages.items() if b.share.mean_pct]
    if not shares:
        return None, None
    v, n = max(shares)
    return n, v


def _ev_overlap(r: Result, s, th):
    ov = r.overlap.gpu_busy_fraction_of_pooler_span
    if not _cuda(r) or ov is None:
        return None
    stage, share = _dominant(r)
    return {"gpu_busy_pct_of_batch_span": 100.0 * ov,
            "gpu_busy_pct_p50_per_batch": 100.0 * r.overlap.gpu_busy_fraction_p50,
            "batches": r.batches, "host_ms_per_request": r.per_request.pooler_host_ms,
            "gpu_busy_ms_per_request": r.per_request.gpu_busy_ms, "dominant_stage": stage,
            "dominant_stage_share_pct_mean": share, "top_functions": _top_functions(r, stage)}


def _sev_overlap(ev, th):
    v = ev["gpu_busy_pct_of_batch_span"]
    if v >= th["overlap_max_pct"]:
        return None
    return "high" if v < th["overlap_max_pct"] / 2 else "medium"


def _tx_overlap(ev, s):
    dom = ev["dominant_stage"]
    where = f"; {dom} takes {ev['dominant_stage_share_pct_mean']:.0f}% of it (mean per batch)" if dom else ""
    where += _say_top(ev.get("top_functions") or [])
    return (f"the GPU is busy {ev['gpu_busy_pct_of_batch_span']:.1f}% of the batch host span (over {ev['batches']:,} "
            f"batches; p50 per batch {ev['gpu_busy_pct_p50_per_batch']:.1f}%){where}",
            f"the host path bounds the batch: shorten {dom or 'the host stages'} first; GPU-side speed-ups will not show",
            f"batch time falls with host time ({ev['host_ms_per_request']:.3f} ms per request) until the GPU busy share "
            "rises")


def _top_functions(r: Result, stage: str | None, k: int = 3) -> list[dict]:
    """The stage's top functions by self samples (name, file, samples, share and its interval,
    ms per request); [] without Python samples there."""
    s = r.samples
    if s is None or stage not in s.stages:
        return []
    st = s.stages[stage]
    return [{"function": f.function, "file": f.file, "self_samples": f.self_samples, "stage_samples": st.samples,
             "self_share": f.self_share, "self_share_low": f.self_share_low, "self_share_high": f.self_share_high,
             "self_ms_per_request": f.self_ms_per_request} for f in st.top_self[:k]]


def _say_top(top: list[dict]) -> str:
    """`heavy (srv.py) 72% [66–78%] of 210 samples, ...`."""
    if not top:
        return ""
    def who(t) -> str:
        base = t["file"].rsplit("/", 1)[-1]
        return f"{t['function']} ({base})" if base else t["function"]

    if top[0]["self_share_low"] == top[0]["self_share_high"]:       # Kineto durations: measured, no interval
        fs = ", ".join(f"{who(t)} {100 * t['self_share']:.0f}%" for t in top)
        return f"; by Python function self time ({top[0]['stage_samples'] / 1e6:,.3f} ms in the stage): {fs}"
    fs = ", ".join(f"{who(t)} {100 * t['self_share']:.0f}% "
                   f"[{100 * t['self_share_low']:.0f}–{100 * t['self_share_high']:.0f}%]" for t in top)
    return f"; by Python samples ({top[0]['stage_samples']:,} in the stage, self, 95% interval): {fs}"


def _ev_share(r: Result, s, th):
    b = r.stages[s]
    if b.share.mean_pct is None:
        return None
    return {**b.share.to_json(), "batches": r.batches, "host_ms_per_request": b.host_ms_per_request,
            "batch_host_ms_per_request": r.per_request.pooler_host_ms, "top_functions": _top_functions(r, s)}


def _sev_share(ev, th):
    return "medium" if ev["share_of_batch_pct_mean"] >= th["dominant_share_pct"] else None


def _tx_share(ev, s):
    m = ev["share_of_batch_pct_mean"]
    return (f"{s} takes {m:.1f}% of the batch host span (mean per batch over {ev['batches']:,} batches; p50 "
            f"{ev['share_of_batch_pct_p50']:.1f}%, p99 {ev['share_of_batch_pct_p99']:.1f}%): "
            f"{ev['host_ms_per_request']:.3f} of {ev['batch_host_ms_per_request']:.3f} ms per request"
            + _say_top(ev.get("top_functions") or []),
            f"look inside {s} first, at the functions named, before any other stage" if ev.get("top_functions") else
            f"look inside {s} first (finer NVTX ranges, or record with --python-sampling to see its functions) "
            "before any other stage",
            f"each 10% cut in {s} saves about {m / 10:.1f}% of the batch host span")


_WORK = ("kernel_launches", "graph_launches", "memcpy_calls", "memset_calls")


def _ev_outside(r: Result, s, th):
    if not _cuda(r) or r.totals.kernel_launches is None:
        return None
    o = r.outside_stages
    total = sum(getattr(r.totals, k) for k in _WORK)
    inb = {k: getattr(o.in_batch, k) for k in _WORK}
    outb = {k: getattr(o.outside_batch, k) for k in _WORK}
    n = sum(inb.values()) + sum(outb.values())
    return {"outside_work_calls": n, "capture_work_calls": total, "outside_pct_of_capture": _per(100.0 * n, total) or 0.0,
            "in_batch_no_stage": inb, "outside_batches": outb}


def _sev_outside(ev, th):
    return "low" if ev["outside_work_calls"] and ev["outside_pct_of_capture"] >= th["outside_min_pct"] else None


def _tx_outside(ev, s):
    def say(d):
        return ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in d.items() if v) or "none"
    return (f"{ev['outside_work_calls']:,} of {ev['capture_work_calls']:,} CUDA work calls of the capture "
            f"({ev['outside_pct_of_capture']:.1f}%) lie outside every stage: in a batch but no stage: "
            f"{say(ev['in_batch_no_stage'])}; outside every batch: {say(ev['outside_batches'])}",
            "add a stage range (or a [stages] target in the spec) around the code that issues them",
            "the per-stage figures then account for all of the batch's CUDA work")


def _ev_batches(r: Result, s, th):
    return {"batches": r.batches, "p99_min_batches": int(th["p99_min_batches"])} if r.batches else None


def _sev_batches(ev, th):
    return "low" if ev["batches"] < th["p99_min_batches"] else None


def _tx_batches(ev, s):
    return (f"{ev['batches']:,} batches: a p99 per batch needs at least {ev['p99_min_batches']:,} to have one batch "
            "beyond it; here it is interpolated between the slowest few",
            f"record a longer window (at least {ev['p99_min_batches']:,} batches) before quoting p99",
            "a p99 that is a percentile, not the slowest batch")


def _ev_cut(r: Result, s, th):
    cut = r.excluded.cut_at_edges
    tail = r.lost_records.batches_after_cuda_end if r.lost_records is not None else 0
    return {"ranges_cut_at_edges": sum(cut.values()), "cut_by_range": dict(cut), "batches_kept": r.batches,
            "batches_after_cuda_end": tail, "window_by_record": r.window_by_record}


def _sev_cut(ev, th):
    # ranges cut at a window that `record` opened are expected: only a lost CUDA tail remains
    cut = ev["ranges_cut_at_edges"] and not ev["window_by_record"]
    return "info" if cut or ev["batches_after_cuda_end"] else None


def _tx_cut(ev, s):
    by = ", ".join(f"{k}: {v}" for k, v in ev["cut_by_range"].items())
    tail = f"; {ev['batches_after_cuda_end']:,} batches after the last CUDA record" if ev["batches_after_cuda_end"] else ""
    return (f"{ev['ranges_cut_at_edges']:,} ranges cut by the capture window{f' ({by})' if by else ''}{tail} were "
            f"excluded; {ev['batches_kept']:,} batches kept",
            "nothing to fix in the server; open the window after warm-up and close it after the last batch to keep them",
            "every batch of the window in the figures")


def _ev_lost(r: Result, s, th):
    lost = r.lost_records       # None without CUDA trace; needs no request count
    if lost is None:
        return None
    return {k: v for k, v in lost.to_json().items() if k != "batches_after_cuda_end"}


def _sev_lost(ev, th):
    return "high" if any(ev.values()) else None


def _tx_lost(ev, s):
    parts = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in ev.items() if v)
    return (f"CUDA records were lost: {parts}",
            "record again: stop the capture before the server exits (cudaProfilerStop or nsys stop), shorter window",
            "copy, kernel and overlap figures that count every call")


RULES = (
    Rule("pageable-h2d", "stage", "pageable H2D copies", "pageable_copies_per_request", "per request",
         _ev_pageable, _sev_pageable, _tx_pageable),
    Rule("small-h2d-copies", "stage", "small H2D copies", "h2d_copies_per_request", "per request",
         _ev_pack, _sev_pack, _tx_pack),
    Rule("sync-in-stage", "stage", "waits for the GPU", "syncs_per_request", "per request",
         _ev_sync, _sev_sync, _tx_sync),
    Rule("no-cuda-graph", "stage", "kernel launches without a CUDA graph", "kernel_launches_per_request",
         "per request", _ev_graph, _sev_graph, _tx_graph),
    Rule("dominant-stage", "stage", "share of the batch host span", "share_of_batch_pct_mean", "% mean per batch",
         _ev_share, _sev_share, _tx_share),
    Rule("host-bound", "batch", "GPU idle through the batch (host-bound)", "gpu_busy_pct_of_batch_span",
         "% of the batch host span", _ev_overlap, _sev_overlap, _tx_overlap),
    Rule("cuda-outside-stages", "outside", "CUDA work outside every stage", "outside_work_calls", "calls",
         _ev_outside, _sev_outside, _tx_outside),
    Rule("lost-records", "capture", "lost CUDA records", "memcpy_records_without_call", "records",
         _ev_lost, _sev_lost, _tx_lost),
    Rule("cut-window", "capture", "ranges cut by the capture window", "ranges_cut_at_edges", "ranges",
         _ev_cut, _sev_cut, _tx_cut),
    Rule("few-batches", "capture", "too few batches for a stable p99", "batches", "batches",
         _ev_batches, _sev_batches, _tx_batches),
)
RULE = {r.id: r for r in RULES}
_SCOPE = {"batch": BATCH_SCOPE, "outside": OUTSIDE_SCOPE, "capture": CAPTURE_SCOPE}


def _scopes(rule: Rule, result: Result) -> list[str]:
    return list(result.stages) if rule.scope == "stage" else [_SCOPE[rule.scope]]


def evidence(result: Result, rule_id: str, stage: str, th: dict | None = None) -> dict | None:
    """The evidence of one rule for one stage (or scope) of a result, whether it fires or not."""
    rule = RULE[rule_id]
    if rule.scope == "stage" and stage not in result.stages:
        return None
    return rule.evidence(result, stage, th or thresholds())


def evaluate(result: Result, th: dict | None = None) -> list[Finding]:
    """Every finding of a result, most severe first, then in rule and stage order."""
    th = th or thresholds()
    out = []
    # with no request count (every batch n=0, or no batch) only the capture's own rules can judge
    rules = RULES if result.requests else [r for r in RULES if r.scope == "capture"]
    for rule in rules:
        for scope in _scopes(rule, result):
            ev = rule.evidence(result, scope, th)
            sev = None if ev is None else rule.severity(ev, th)
            if sev is None:
                continue
            summary, advice, expected = rule.text(ev, scope)
            out.append(Finding(id=rule.id, stage=scope, severity=sev, title=rule.title, summary=summary,
                               evidence=ev, advice=advice, expected=expected))
    out.sort(key=lambda f: SEVERITIES.index(f.severity))
    return out


# ---------------------------------------------------------------------------------------------
# presentation


def lines(result: Result) -> list[str]:
    """One plain line per finding (terminal); [] when there are none."""
    return [f"[{f.severity}] {f.stage} · {f.id}: {f.summary} → fix: {f.advice} · expected: {f.expected}"
            for f in result.findings]


# ---------------------------------------------------------------------------------------------
# compare: per finding, resolved, new or still there


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.2f}"
    return f"{int(v):,}"


def compare_findings(results: dict[str, list[Result]], baseline: str) -> list[dict]:
    """For every finding that fires in some capture of some arm: in each arm, how many captures it
    fires in and the mean of its key figure; per other arm, its status against the baseline
    (resolved, new, still there)."""
    keys: dict[tuple[str, str], None] = {}
    for rs in results.values():
        for r in rs:
            for f in r.findings:
                keys.setdefault((f.id, f.stage), None)
    out = []
    for rid, stage in keys:
        rule = RULE[rid]
        entry = {"id": rid, "stage": stage, "title": rule.title, "key": rule.key, "unit": rule.unit, "arms": {}}
        for arm, rs in results.items():
            fired = [f for r in rs for f in r.findings if (f.id, f.stage) == (rid, stage)]
            evs = [evidence(r, rid, stage, r.findings_thresholds) for r in rs]
            vals = [e[rule.key] for e in evs if e is not None and isinstance(e.get(rule.key), (int, float))]
            entry["arms"][arm] = {"fired_in": len(fired), "captures": len(rs),
                                  "value": float(np.mean(vals)) if vals else None,
                                  "severity": fired[0].severity if fired else None,
                                  "evidence": fired[0].evidence if fired else next((e for e in evs if e), None)}
        base = entry["arms"][baseline]["fired_in"] > 0
        entry["status"] = {}
        for arm in results:
            if arm == baseline:
                continue
            now = entry["arms"][arm]["fired_in"] > 0
            entry["status"][arm] = "still there" if base and now else ("resolved" if base else "new")
        out.append(entry)
    return out


def compare_lines(comp: dict) -> list[str]:
    """'pageable H2D copies in transfer: resolved (9 → 0 per request)', one line per finding and arm."""
    base = comp["baseline"]
    out = []
    for f in comp.get("findings", []):
        b = f["arms"][base]
        for arm, status in f["status"].items():
            a = f["arms"][arm]
            where = "" if f["stage"].startswith("(") else f" in {f['stage']}"
            fired = "" if a["captures"] == b["captures"] == 1 else (
                f"; fired in {b['fired_in']}/{b['captures']} → {a['fired_in']}/{a['captures']} captures")
            out.append(f"{f['title']}{where} (`{f['id']}`): {status} ({_fmt(b['value'])} → {_fmt(a['value'])} "
                       f"{f['unit']}{fired})")
    return out
