"""Render an analysis: rich terminal tables, Markdown for a PR, CSV rows, JSON."""
from __future__ import annotations

import csv
import io
import json

from .markup import md
from ..analyze.model import RangeFigures, Result, StageFigures
from rich.console import Console
from rich.text import Text

# (figure of a stage's or the batch range's `RangeFigures`, header, formatter kind); two tables
# keep the terminal narrow. Figures a range does not have (the batch range's share of itself) are None.
def _stage(get):
    return lambda f: get(f) if isinstance(f, StageFigures) else None


HOST_COLUMNS = [
    (lambda f: f.instances, "instances", "int"),
    (lambda f: f.host_ms_total, "ms total", "ms"),
    (lambda f: f.host_ms_per_request, "ms /request", "ms"),
    (lambda f: f.host_ms_mean, "mean ms /batch", "ms"),
    (lambda f: f.host_ms_p50, "p50 ms /batch", "ms"),
    (lambda f: f.host_ms_p99, "p99 ms /batch", "ms"),
    (_stage(lambda f: f.share.mean_pct), "% of batch span mean", "pct"),
    (_stage(lambda f: f.share.p50_pct), "% p50", "pct"),
    (_stage(lambda f: f.share.p99_pct), "% p99", "pct"),
    (_stage(lambda f: f.outside_batch_instances), "outside batch", "int"),
]
CUDA_COLUMNS = [
    (lambda f: f.cuda_per_request.h2d_copies, "H2D copies /req", "f2"),
    (lambda f: f.cuda_per_request.h2d_bytes, "H2D B /req", "f0"),
    (lambda f: f.cuda.h2d_pinned_pct, "H2D pinned %", "pct"),
    (lambda f: f.cuda_per_request.d2h_copies, "D2H copies /req", "f2"),
    (lambda f: f.cuda_per_request.kernel_launches, "kernel launches /req", "f2"),
    (lambda f: f.cuda_per_request.graph_launches, "graph launches /req", "f2"),
    (lambda f: f.cuda.graph_kernels, "graph kernels /capture", "int"),
]
# every other count of CudaCounts, per capture: what the per-request tables leave out
COUNT_COLUMNS = [
    (lambda f: f.cuda.d2h_bytes, "D2H B", "int"),
    (lambda f: f.cuda.gpu_kernels, "GPU kernels", "int"),
    (lambda f: f.cuda.graph_executions, "graph execs", "int"),
    (lambda f: f.cuda.memcpy_calls, "memcpy calls", "int"),
    (lambda f: f.cuda.memset_calls, "memset calls", "int"),
    (lambda f: f.cuda.sync_calls, "sync calls", "int"),
    (lambda f: f.cuda.device_syncs, "device syncs", "int"),
    (lambda f: f.cuda.sync_memcpy_calls, "sync memcpy calls", "int"),
]
COLUMNS = HOST_COLUMNS + CUDA_COLUMNS + COUNT_COLUMNS
# the CSV's columns: keys of the JSON stage block (docs/json.md)
CSV_KEYS = ["instances", "host_ms_total", "host_ms_per_request", "host_ms_mean", "host_ms_p50", "host_ms_p99",
            "share_of_batch_pct_mean", "share_of_batch_pct_p50", "share_of_batch_pct_p99",
            "h2d_copies", "h2d_bytes", "h2d_pageable", "h2d_pinned", "d2h_copies", "d2h_bytes",
            "kernel_launches", "graph_launches", "graph_kernels", "gpu_kernels", "graph_executions",
            "memcpy_calls", "memset_calls", "sync_calls", "device_syncs", "sync_memcpy_calls", "h2d_copies_per_request", "h2d_bytes_per_request",
            "d2h_copies_per_request", "kernel_launches_per_request", "graph_launches_per_request",
            "outside_batch_instances", "outside_batch_host_ms_per_request"]


def fmt(value, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "ms":
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.1f}"
    if kind == "pct":
        return f"{value:.0f}%"
    if kind == "f0":
        return f"{value:,.0f}"
    return f"{value:.2f}"


def stage_rows(result: Result) -> list[tuple[str, RangeFigures]]:
    """(name, figures) of each stage, then the batch range's ('NAME (batch)') when it has instances."""
    rows: list[tuple[str, RangeFigures]] = list(result.stages.items())
    pooler = result.pooler
    if pooler.instances:
        rows.append((f"{pooler.name} (batch)", pooler))
    return rows


def headline(result: Result) -> list[str]:
    """The lines above the table: requests, capture, transfers, overlap."""
    cap = result.capture
    req = result.requests
    src = result.requests_source
    if src and src != "--requests":
        # a batch's size is the rows it scheduled: a request split by chunked prefill counts in each step
        src = f" (rows scheduled in batch ranges, from {src}; not requests finished)"
    else:
        src = f" (from {src})" if src else ""
    batch = result.config.batch
    lines = [f"requests: {req if req is not None else 'unknown'}{src} · batches: {result.batches}"
             f" · stage domain {result.config.domain!r}, batch range {batch!r}"]
    dur = cap.duration_s
    lines.append(f"capture: nsys {cap.nsys_version or '?'}, schema {cap.schema_version or '?'}, "
                 f"{dur:.3f} s session" if dur is not None else
                 f"capture: nsys {cap.nsys_version or '?'}, schema {cap.schema_version or '?'}")
    if cap.source is not None:      # a PyTorch profiler trace read as a capture (analyze.read.kineto)
        lines[-1] = (f"capture: PyTorch profiler (Kineto) trace, {cap.source.get('files')} file(s), time precision "
                     f"{cap.source.get('time_precision')}" + (f", {dur:.3f} s of events" if dur is not None else ""))
    if cap.cuda_traced:
        lines[-1] += f", CUDA graph trace: {cap.graph_trace_mode}"
        if cap.graph_trace_mode == "graph":
            lines[-1] += " (graph kernels leave no per-kernel GPU record)"
    for t in cap.threads:
        lines.append(f"  stages on pid {t.pid} ({t.process or '?'}), tid {t.tid} ({t.thread or '?'}): "
                     f"{t.batches} batches, {sum(t.stage_instances.values())} stage instances")
        loose = t.outside_batch_instances
        if loose and result.batches:
            lines.append(f"    outside every {batch!r} range on this thread: "
                         + ", ".join(f"{s} {n:,}" for s, n in loose.items())
                         + " instances (counted in the stage rows, in no batch)")
    for r in result.ranks:
        if r.counted:
            continue
        ov_r = r.gpu_busy_fraction_of_pooler_span
        lines.append(f"  pid {r.pid} runs the same batches as pid {r.first_rank_pid} (a replica rank): its "
                     f"{r.batches} batches ({r.requests} requests) are not counted again; the figures are pid "
                     f"{r.first_rank_pid}'s" + (f"; its own GPU overlap {100 * ov_r:.1f}%" if ov_r is not None else ""))
    pr, tot, ov = result.per_request, result.totals, result.overlap
    if cap.cuda_traced:
        pct = tot.h2d_pinned_pct or 0.0
        lines.append(
            f"H2D per request: {fmt(pr.h2d_copies, 'f2')} copies, {fmt(pr.h2d_bytes, 'f0')} B · per capture: "
            f"{tot.h2d_copies:,} copies, {tot.h2d_bytes:,} B, {100 - pct:.0f}% pageable / {pct:.0f}% pinned · "
            f"D2H per capture: {tot.d2h_copies:,} copies, {tot.d2h_bytes:,} B")
        lines.append(
            f"kernels per request: {fmt(pr.kernel_launches, 'f2')} launches, {fmt(pr.graph_launches, 'f2')} "
            f"graph launches · per capture: {tot.kernel_launches:,} launches, {tot.graph_launches:,} graph launches")
        if ov.gpu_busy_fraction_of_pooler_span is not None:
            lines.append(
                f"GPU overlap: busy {100 * ov.gpu_busy_fraction_of_pooler_span:.1f}% of the {batch} "
                f"host span (per capture; p50 per batch {100 * ov.gpu_busy_fraction_p50:.1f}%) · GPU busy "
                f"{fmt(ov.gpu_busy_ms_per_request, 'ms')} ms per request")
        out = result.outside_stages
        n_out = (out.in_batch.h2d_copies or 0) + (out.outside_batch.h2d_copies or 0)
        k_out = (out.in_batch.kernel_launches or 0) + (out.outside_batch.kernel_launches or 0)
        lines.append(f"outside every stage (per capture): {n_out:,} H2D copies, {k_out:,} kernel launches")
    return lines


def _jms(v) -> str:
    return "—" if v is None else f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"


def _jpct(v) -> str:
    return "—" if v is None else f"{v:.1f}%"


def journey_rows(result: Result) -> list[tuple[str, object]]:
    """(label, SegmentFigures) of each journey segment, the batch's stages indented under `batch`."""
    j = result.journey
    rows = []
    for name, f in j.segments.items():
        rows.append((name.replace("_", " "), f))
        if name == "batch":
            rows += [(f"  {s}", g) for s, g in j.batch_stages.items()]
    return rows


def journey_head(result: Result) -> list[str]:
    """The request journey's summary lines (what is counted, what did not meet, the client check)."""
    j = result.journey
    out = [f"request journey: {j.complete:,} of {j.request_ranges:,} request ranges complete "
           f"(per request, ms)",
           f"  end-to-end: mean {_jms(j.e2e_ms_mean)}, p50 {_jms(j.e2e_ms_p50)}, p99 {_jms(j.e2e_ms_p99)} ms; "
           f"tail (>= p99): {j.tail_requests:,} requests"]
    odd = [(j.cut_by_window, "cut by the capture window"), (j.reversed, "ending before they start (damaged)"), (j.without_batch, "with no batch in the capture"),
           (j.without_enqueue, "complete without an enqueue mark"),
           (j.out_of_order, "complete with points out of order"),
           (j.unclaimed_batch_ids, "batch ids no request range took"),
           (j.batches_with_cut_ids, "batches whose rid= list was cut")]
    for n, what in odd:
        if n:
            out.append(f"  {n:,} {what}")
    for key, ids in j.listed.items():
        if ids:
            out.append(f"  {key.replace('_', ' ')}: " + ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else ""))
    c = j.client
    if c is not None:
        out.append(f"  client check: journeys {c.journey_e2e_ms_mean:.3f} ms, client {c.client_latency_ms_mean:.3f} "
                   f"ms mean; gap {c.gap_ms:.3f} ms ({'within' if c.agrees else 'beyond'} "
                   f"{c.allowance_ms:.3f} ms)")
    return out


def journey_text(result: Result, width: int = 80) -> list[str]:
    """The request journey section as lines of at most `width` columns (wrapped, never cut)."""
    from .termtable import Column, table, wrap

    out = []
    for line in journey_head(result):
        body = line.lstrip(" ")
        lead = line[:len(line) - len(body)]
        out += wrap(body, width, lead + "  ", lead)
    cols = [Column("segment", "left")] + [Column(h) for h in ("mean ms", "p50 ms", "p99 ms", "share",
                                                               "tail mean ms", "tail %")]
    rows = [[name, _jms(f.mean_ms), _jms(f.p50_ms), _jms(f.p99_ms), _jpct(f.share_pct), _jms(f.tail_mean_ms),
             _jpct(f.tail_share_pct)] for name, f in journey_rows(result)]
    return out + table(cols, rows, width)


def journey_markdown(result: Result) -> list[str]:
    out = ["", "**request journey**", ""] + [f"- {md(line.strip())}" for line in journey_head(result)]
    out += ["", "| segment | mean ms | p50 ms | p99 ms | share | tail mean ms | tail share |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name, f in journey_rows(result):
        label = md(name.strip()) if not name.startswith("  ") else f"↳ {md(name.strip())}"
        out.append(f"| {label} | {_jms(f.mean_ms)} | {_jms(f.p50_ms)} | {_jms(f.p99_ms)} | {_jpct(f.share_pct)} | "
                   f"{_jms(f.tail_mean_ms)} | {_jpct(f.tail_share_pct)} |")
    return out


SAMPLE_TOP = 5      # functions per stage in the terminal and Markdown


def samples_head(result: Result) -> list[str]:
    """What the Python samples are: how many, the rate asked and observed, what one stands for."""
    s = result.samples
    if s.unit == "ns":
        return [f"Python functions from the trace's python_function events (torch profiler with_stack): "
                f"{s.samples / 1e6:,.3f} ms of function self time on {s.threads} thread(s); per stage, the top functions "
                "by self time (each event's duration less its callees'), share of the stage's function time, ms per "
                "request; measured durations, not samples: no sampling interval"]
    rate = f"{s.observed_hz:.0f} Hz observed" if s.observed_hz else "rate unknown"
    asked = f" (asked {s.asked_hz:g} Hz)" if s.asked_hz else ""
    each = f"{s.ms_per_sample:.2f} ms each" if s.ms_per_sample else "no time per sample"
    own = f" ({s.own_samples:,} of clef-prof's own threads left out)" if s.own_samples else ""
    return [f"Python samples: {s.samples:,}{own} on {s.threads} thread(s), {rate}{asked}, {each}; per stage, the top "
            f"functions by self samples (the innermost Python frame: the line that called into C), share of the "
            f"stage's samples with its {s.confidence:.0%} interval, ms per request = samples x ms each / requests"]


def _sample_stages(result: Result):
    """(stage title, [(function label, self share, inclusive share, self ms/req)]) of each slot with samples."""
    from ..analyze.figures.samples import label, share_text

    out = []
    for stage, st in result.samples.stages.items():
        if not st.samples:
            continue
        few = "; too few to measure shares" if st.few else ""
        what = f"{st.samples / 1e6:,.3f} ms" if result.samples.unit == "ns" else f"{st.samples:,} samples"
        idle = f"; {100 * st.idle_samples / st.samples:.0f}% idle waits" if st.idle_samples else ""
        work = " of work" if st.idle_samples and stage == "(outside)" else ""
        title = (f"{stage}: {what} ({100 * st.share_of_samples:.0f}% of all{idle}), {_jms(st.ms_per_request)} ms per "
                 f"request{work}{few}")
        out.append((title, [(label(f), share_text(f), share_text(f, self_=False), _jms(f.self_ms_per_request))
                            for f in st.top_self[:SAMPLE_TOP]]))
    return out


def samples_text(result: Result, width: int = 80) -> list[str]:
    """The Python samples section as lines of at most `width` columns."""
    from .termtable import Column, table, wrap

    out = [w for line in samples_head(result) for w in wrap(line, width, "  ")]
    ci = "" if result.samples.unit == "ns" else " [95%]"
    cols = [Column("function (file)", "left"), Column(f"self{ci}"), Column(f"incl{ci}"), Column("self ms/req")]
    for title, rows in _sample_stages(result):
        out += [""] + table(cols, [list(r) for r in rows], width, title=title)
    return out


def samples_markdown(result: Result) -> list[str]:
    out = ["", "**Python samples**", ""] + [f"- {md(line)}" for line in samples_head(result)]
    for title, rows in _sample_stages(result):
        ci = "" if result.samples.unit == "ns" else " [95%]"
        out += ["", md(title), "", f"| function (file) | self{ci} | inclusive{ci} | self ms /request |",
                "|---|---:|---:|---:|"]
        out += [f"| {md(fn, code=True)} | {sh} | {inc} | {ms} |" for fn, sh, inc, ms in rows]
    return out


# the key figures of the default terminal view, one row per stage (the rest: --wide)
KEY_COLUMNS = [
    (lambda f: f.host_ms_per_request, "host ms /request", "ms"),
    (_stage(lambda f: f.share.mean_pct), "% of batch span", "pct"),
]
KEY_CUDA_COLUMNS = [
    (lambda f: f.cuda_per_request.h2d_copies, "H2D copies /req", "f2"),
    (lambda f: f.cuda_per_request.kernel_launches, "kernel launches /req", "f2"),
]


def stage_table(result: Result, cols, width: int, title: str | None = None) -> list[str]:
    """The stage rows under `cols` ((get, header, kind) triples) as lines at most `width` wide."""
    from .termtable import Column, table

    columns = [Column("stage", "left")] + [Column(h) for _, h, _ in cols]
    rows = [[name] + [fmt(get(f), kind) for get, _, kind in cols] for name, f in stage_rows(result)]
    return table(columns, rows, width, title=title)


def key_lines(result: Result) -> list[str]:
    """The figures a reader looks for first: requests, then per stage host ms per request, share of
    the batch span, H2D copies and kernel launches per request; then transfers and overlap."""
    req = result.requests
    src = result.requests_source
    what = ("rows scheduled in batch ranges, not requests finished" if src and src != "--requests"
            else f"from {src}" if src else "")
    lines = [f"{f'{req:,}' if req is not None else 'unknown'} requests in {result.batches:,} batches"
             + (f" ({what})" if what else "")]
    return lines


def render_terminal(result: Result, console: Console | None = None, wide: bool = False,
                    width: int | None = None) -> None:
    """Key figures first (requests; per stage host ms, share, H2D copies and kernels per request;
    transfers; overlap), then the findings, then the capture's details; every line fits `width`
    (the terminal's) without cutting a figure. `wide`: also the full host and CUDA tables."""
    from ..analyze.judge.findings import lines as finding_lines
    from .termtable import width as term_width, wrap

    width = width or term_width()
    console = console or Console(width=max(width, 20), soft_wrap=True)

    def say(lines, style=None):
        for line in lines:
            console.print(Text(line, style=style or ""), highlight=False, soft_wrap=True)

    cuda = result.capture.cuda_traced
    say(wrap(f"clef-prof analyze {result.path}", width, "  "), "bold")
    say([line for line in key_lines(result) for line in wrap(line, width, "  ")])
    say([""])
    cols = KEY_COLUMNS + (KEY_CUDA_COLUMNS if cuda else [])
    say(stage_table(result, cols, width))
    say([""])
    head = headline(result)     # requests; capture; its threads and ranks (indented); transfers, overlap
    details = [line for line in head[2:] if line.startswith(" ")]
    say([w for line in head[2:] if not line.startswith(" ") for w in wrap(line, width, "  ")])
    say([""])
    if result.journey is not None:
        say(journey_text(result, width))
        say([""])
    if result.samples is not None:
        say(samples_text(result, width))
        say([""])
    say([f"Findings ({len(result.findings)})"], "bold")
    for line in finding_lines(result):
        say(wrap(line, width, "    "))
    say([""])
    say(["Details"], "bold")
    say(wrap(f"stage domain {result.config.domain!r}, batch range {result.config.batch!r}; " + head[1], width, "  "))
    say([w for line in details for w in wrap(line.strip(), width, "    ", "  ")])
    cut = result.excluded.cut_at_edges
    if result.window_by_record and cut:
        say(wrap(f"{sum(cut.values()):,} ranges cut at the edges of the window record opened were left out, as "
                 f"expected ({', '.join(f'{k}: {v}' for k, v in cut.items())})", width, "    ", "  "))
    if wide:
        say([""])
        say(stage_table(result, HOST_COLUMNS, width, "host time per stage (NVTX ranges)"))
        if cuda:
            say([""])
            say(stage_table(result, CUDA_COLUMNS, width, "CUDA work per stage (placed by the launching API call)"))
            say([""])
            say(stage_table(result, COUNT_COLUMNS, width, "CUDA calls and GPU records per stage, per capture"))
    else:
        say(wrap("Every figure per stage, per batch and per capture: --wide, -f markdown, or report --html.",
                 width, "  "))
    for w in result.warnings:
        say(wrap(f"warning: {w}", width, "  "), "yellow")


def render_markdown(result: Result) -> str:
    cols = COLUMNS if result.capture.cuda_traced else HOST_COLUMNS
    out = [f"**clef-prof analyze** {md(result.path, code=True)}", ""]
    out += [f"- {md(line.strip())}" for line in headline(result)]
    # one table per kind of figure (host time, CUDA work per request, counts per capture), each
    # narrow enough to read in a rendered page or a diff: one of 26 columns was neither
    groups = [("Host time", HOST_COLUMNS)]
    if cols is COLUMNS:
        groups += [("CUDA work per request", CUDA_COLUMNS), ("CUDA counts per capture", COUNT_COLUMNS)]
    rows = stage_rows(result)
    for title, group in groups:
        out += ["", f"**{title}**", ""]
        out.append("| stage | " + " | ".join(h.replace("\n", " ") for _, h, _ in group) + " |")
        out.append("|---|" + "---:|" * len(group))
        for name, figures in rows:
            out.append(f"| {md(name)} | " + " | ".join(fmt(get(figures), kind) for get, _, kind in group) + " |")
    if result.journey is not None:
        out += journey_markdown(result)
    if result.samples is not None:
        out += samples_markdown(result)
    out += findings_markdown(result)
    if result.warnings:
        out.append("")
        out += [f"> **warning:** {md(w)}" for w in result.warnings]
    return "\n".join(out) + "\n"


def render_csv(result: Result) -> str:
    """One row per stage and one for the batch range, in the JSON stage block's own keys."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["capture", "stage", "requests", *CSV_KEYS])
    for name, figures in [*result.stages.items(), (result.pooler.name, result.pooler)]:
        block = figures.to_json()
        w.writerow([result.path, name, result.requests, *("" if block.get(k) is None else block.get(k)
                                                           for k in CSV_KEYS)])
    return buf.getvalue()


JOURNEY_CSV = ["rid", "pid", "tid", "cut", "batch", "batch_size", "start_ns", "end_ns", "e2e_ns", "receive_ns",
               "queue_ns", "batch_ns", "after_batch_ns", "encode_ns", "send_ns", "unattributed_ns", "enqueue_ns",
               "batch_start_ns", "batch_end_ns", "encode_start_ns", "encode_end_ns", "out_of_order", "other_ranks_ns"]


def render_journeys_csv(rows) -> str:
    """One row per request range (analyze's `Analysis.journeys`), the columns of JOURNEY_CSV
    (docs/journey.md): times in ns from the session start, -1 where a point is absent."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(JOURNEY_CSV)
    g = rows["gtid"].astype("int64")
    cols = {"pid": (g >> 24) & 0xFFFFFF, "tid": g & 0xFFFFFF, "start_ns": rows["start"], "end_ns": rows["end"],
            "enqueue_ns": rows["enqueue"], "batch_start_ns": rows["batch_start"], "batch_end_ns": rows["batch_end"],
            "encode_start_ns": rows["encode_start"], "encode_end_ns": rows["encode_end"]}
    data = [cols[k] if k in cols else rows[k] for k in JOURNEY_CSV]
    for rec in zip(*(c.tolist() for c in data)):
        w.writerow(rec)
    return buf.getvalue()


def render_json(result: Result) -> str:
    return json.dumps(result.to_json(), indent=2, sort_keys=False) + "\n"


def findings_markdown(result: Result) -> list[str]:
    """The Markdown "Findings" section, as lines."""
    found = result.findings
    out = ["", "#### Findings", ""]
    if not found:
        return out + ["No rule fired (thresholds: `clef-prof analyze -f json`, `findings_thresholds`)."]
    for f in found:
        out.append(f"- **{f.severity}** · {md(f.stage, code=True)} · `{f.id}`: {md(f.summary)}  \n"
                   f"  fix: {md(f.advice)}  \n  expected: {md(f.expected)}")
    return out
