"""Render an analysis: rich terminal tables, Markdown for a PR, CSV rows, JSON."""
from __future__ import annotations

import csv
import io
import json
import sys

from ..analyze.markup import md
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

# (key in a stage block, header, formatter kind); two tables keep the terminal narrow
HOST_COLUMNS = [
    ("instances", "instances", "int"),
    ("host_ms_total", "ms total", "ms"),
    ("host_ms_per_request", "ms /request", "ms"),
    ("host_ms_mean", "mean ms /batch", "ms"),
    ("host_ms_p50", "p50 ms /batch", "ms"),
    ("host_ms_p99", "p99 ms /batch", "ms"),
    ("share_of_batch_pct_mean", "% of batch span mean", "pct"),
    ("share_of_batch_pct_p50", "% p50", "pct"),
    ("share_of_batch_pct_p99", "% p99", "pct"),
    ("outside_batch_instances", "outside batch", "int"),
]
CUDA_COLUMNS = [
    ("h2d_copies_per_request", "H2D copies /req", "f2"),
    ("h2d_bytes_per_request", "H2D B /req", "f0"),
    ("h2d_pinned_pct", "H2D pinned %", "pct"),
    ("d2h_copies_per_request", "D2H copies /req", "f2"),
    ("kernel_launches_per_request", "kernel launches /req", "f2"),
    ("graph_launches_per_request", "graph launches /req", "f2"),
    ("graph_kernels", "graph kernels /capture", "int"),
]
COLUMNS = HOST_COLUMNS + CUDA_COLUMNS
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


def stage_rows(result: dict) -> list[tuple[str, dict]]:
    """(name, figures) of each stage, then the batch range's ('NAME (batch)') when it has instances."""
    rows = [(name, block) for name, block in result["stages"].items()]
    pooler = result["pooler"]
    if pooler["instances"]:
        rows.append((f"{pooler['name']} (batch)", pooler))
    return rows


def with_pct(block: dict) -> dict:
    """A stage block with `h2d_pinned_pct` (None without H2D copies)."""
    b = dict(block)
    h2d = b.get("h2d_copies")
    b["h2d_pinned_pct"] = None if not h2d else 100.0 * b["h2d_pinned"] / h2d
    return b


def headline(result: dict) -> list[str]:
    """The lines above the table: requests, capture, transfers, overlap."""
    cap = result["capture"]
    req = result["requests"]
    src = result.get("requests_source")
    if src and src != "--requests":
        # a batch's size is the rows it scheduled: a request split by chunked prefill counts in each step
        src = f" (rows scheduled in batch ranges, from {src}; not requests finished)"
    else:
        src = f" (from {src})" if src else ""
    lines = [f"requests: {req if req is not None else 'unknown'}{src} · batches: {result['batches']}"
             f" · stage domain {result['config']['domain']!r}, batch range {result['config']['batch']!r}"]
    dur = cap["duration_s"]
    lines.append(f"capture: nsys {cap['nsys_version'] or '?'}, schema {cap['schema_version'] or '?'}, "
                 f"{dur:.3f} s session" if dur is not None else
                 f"capture: nsys {cap['nsys_version'] or '?'}, schema {cap['schema_version'] or '?'}")
    if cap["cuda_traced"]:
        lines[-1] += f", CUDA graph trace: {cap['graph_trace_mode']}"
        if cap["graph_trace_mode"] == "graph":
            lines[-1] += " (graph kernels leave no per-kernel GPU record)"
    for t in cap["threads"]:
        lines.append(f"  stages on pid {t['pid']} ({t['process'] or '?'}), tid {t['tid']} ({t['thread'] or '?'}): "
                     f"{t['batches']} batches, {sum(t['stage_instances'].values())} stage instances")
        loose = t.get("outside_batch_instances") or {}
        if loose and result["batches"]:
            lines.append(f"    outside every {result['config']['batch']!r} range on this thread: "
                         + ", ".join(f"{s} {n:,}" for s, n in loose.items())
                         + " instances (counted in the stage rows, in no batch)")
    reps = [r for r in result.get("ranks", []) if not r["counted"]]
    for r in reps:
        ov_r = r["gpu_busy_fraction_of_pooler_span"]
        lines.append(f"  pid {r['pid']} runs the same batches as pid {r['first_rank_pid']} (a replica rank): its "
                     f"{r['batches']} batches ({r['requests']} requests) are not counted again; the figures are pid "
                     f"{r['first_rank_pid']}'s" + (f"; its own GPU overlap {100 * ov_r:.1f}%" if ov_r is not None else ""))
    pr, tot, ov = result["per_request"], result["totals"], result["overlap"]
    if cap["cuda_traced"]:
        pct = (100.0 * tot["h2d_pinned"] / tot["h2d_copies"]) if tot["h2d_copies"] else 0.0
        lines.append(
            f"H2D per request: {fmt(pr['h2d_copies'], 'f2')} copies, {fmt(pr['h2d_bytes'], 'f0')} B · per capture: "
            f"{tot['h2d_copies']:,} copies, {tot['h2d_bytes']:,} B, {100 - pct:.0f}% pageable / {pct:.0f}% pinned · "
            f"D2H per capture: {tot['d2h_copies']:,} copies, {tot['d2h_bytes']:,} B")
        lines.append(
            f"kernels per request: {fmt(pr['kernel_launches'], 'f2')} launches, {fmt(pr['graph_launches'], 'f2')} "
            f"graph launches · per capture: {tot['kernel_launches']:,} launches, {tot['graph_launches']:,} graph launches")
        if ov["gpu_busy_fraction_of_pooler_span"] is not None:
            lines.append(
                f"GPU overlap: busy {100 * ov['gpu_busy_fraction_of_pooler_span']:.1f}% of the {result['config']['batch']} "
                f"host span (per capture; p50 per batch {100 * ov['gpu_busy_fraction_p50']:.1f}%) · GPU busy "
                f"{fmt(ov['gpu_busy_ms_per_request'], 'ms')} ms per request")
        out = result["outside_stages"]
        n_out = (out["in_batch"]["h2d_copies"] or 0) + (out["outside_batch"]["h2d_copies"] or 0)
        k_out = (out["in_batch"]["kernel_launches"] or 0) + (out["outside_batch"]["kernel_launches"] or 0)
        lines.append(f"outside every stage (per capture): {n_out:,} H2D copies, {k_out:,} kernel launches")
    return lines


def render_terminal(result: dict, console: Console | None = None) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    console.print(f"[bold]clef-prof analyze[/bold] {escape(result['path'])}", highlight=False)
    for line in headline(result):
        console.print(Text(line), highlight=False)
    tables = [("host time per stage (NVTX ranges)", HOST_COLUMNS)]
    if result["capture"]["cuda_traced"]:
        tables.append(("CUDA work per stage (placed by the launching API call)", CUDA_COLUMNS))
    for title, cols in tables:
        table = Table(title=title, title_justify="left")
        table.add_column("stage")
        for _, header, _ in cols:
            table.add_column(header, justify="right")
        for name, block in stage_rows(result):
            b = with_pct(block)
            table.add_row(Text(name), *(fmt(b.get(k), kind) for k, _, kind in cols))
        console.print(table)
    from ..analyze.findings import lines as finding_lines
    if "findings" in result:
        console.print(f"[bold]Findings[/bold] ({len(result['findings'])})", highlight=False)
    for line in finding_lines(result):
        console.print(line, highlight=False, markup=False)
    for w in result["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False)


def render_markdown(result: dict) -> str:
    cols = COLUMNS if result["capture"]["cuda_traced"] else HOST_COLUMNS
    out = [f"**clef-prof analyze** {md(result['path'], code=True)}", ""]
    out += [f"- {md(line.strip())}" for line in headline(result)]
    out.append("")
    out.append("| stage | " + " | ".join(h.replace("\n", " ") for _, h, _ in cols) + " |")
    out.append("|---|" + "---:|" * len(cols))
    for name, block in stage_rows(result):
        b = with_pct(block)
        out.append(f"| {md(name)} | " + " | ".join(fmt(b.get(k), kind) for k, _, kind in cols) + " |")
    from ..analyze.findings import markdown as findings_markdown
    out += findings_markdown(result)
    if result["warnings"]:
        out.append("")
        out += [f"> **warning:** {md(w)}" for w in result["warnings"]]
    return "\n".join(out) + "\n"


def render_csv(result: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["capture", "stage", "requests", *CSV_KEYS])
    for name, block in [*result["stages"].items(), (result["pooler"]["name"], result["pooler"])]:
        w.writerow([result["path"], name, result["requests"], *("" if block.get(k) is None else block.get(k)
                                                                 for k in CSV_KEYS)])
    return buf.getvalue()


def render_json(result: dict) -> str:
    return json.dumps(result, indent=2, sort_keys=False) + "\n"
