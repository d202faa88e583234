"""`clef-prof report CAPTURE --html OUT.html`: one self-contained HTML page per capture.

The page holds analyze's headline, its per-request and per-stage tables, the capture's threads,
a timeline of consecutive batches and the per-stage duration distributions. The pictures are
inline SVG (`clef_prof.explore.svg`) and the style sheet is inline: the file references nothing
outside itself (no scripts, fonts, style sheets or images to fetch), so it can be mailed,
attached to CI or opened offline. It is made from one `analyze` pass without row-level tables,
plus the rows of the timeline's time window: neither pandas nor matplotlib is imported.
"""
from __future__ import annotations

import html
import os
from datetime import datetime, timezone

import numpy as np

from ..analyze.figures.metrics import BATCH_KEYS
from ..base.errors import ClefError

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1400px;
color:#1d1d1f;background:#fff;padding:0 16px;line-height:1.4}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
.path{color:#555;margin:0 0 12px}
ul.headline{margin:8px 0;padding-left:18px}ul.headline li{margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0 10px}
th,td{border:1px solid #d0d0d0;padding:3px 8px}th{background:#f2f4f7;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:600;background:#fafafa}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:6px 10px;margin:6px 0}
.key{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}
.key div{border:1px solid #d0d0d0;border-radius:6px;padding:6px 12px;min-width:150px}
.key b{display:block;font-size:20px}.key span{color:#555;font-size:12px}
figure{margin:8px 0}figure svg{display:block;width:100%;height:auto;border:1px solid #e4e4e4}
figcaption{color:#555;font-size:12px;margin-top:4px}
footer{color:#777;font-size:12px;margin:32px 0 8px}
.side{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.side>figure{flex:1 1 1000px;min-width:0}
.findings{flex:1 1 320px;font-size:13px}.findings li{margin:0 0 8px}
.sev-high{color:#b00020}.sev-medium{color:#a05a00}.sev-low{color:#555}.sev-info{color:#777}
"""


def _e(text) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _table(headers: list[str], rows: list[list], num_from: int = 1, total_last: bool = False) -> str:
    out = ["<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = ' class="total"' if total_last and i == len(rows) - 1 else ""
        cells = "".join(f'<td class="num">{_e(v)}</td>' if j >= num_from else f"<td>{_e(v)}</td>"
                        for j, v in enumerate(row))
        out.append(f"<tr{cls}>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _pct1(v) -> str:
    return "—" if v is None else f"{v:.1f}%"


def _figure(svgs: list[str], caption: str) -> str:
    """Inline SVG pictures (each with its own title and description) and their caption."""
    return f"<figure>{''.join(svgs)}<figcaption>{_e(caption)}</figcaption></figure>"


def _findings(r) -> str:
    """The findings as a list, for beside the timeline."""
    found = r.findings
    items = "".join(f'<li><b class="sev-{_e(f.severity)}">{_e(f.severity)}</b> · <code>{_e(f.stage)}</code> · '
                    f'<code>{_e(f.id)}</code>: {_e(f.summary)}<br><i>fix:</i> {_e(f.advice)}<br>'
                    f'<i>expected:</i> {_e(f.expected)}</li>' for f in found)
    return (f'<div class="findings"><b>Findings ({len(found)})</b>'
            f'{"<ul>" + items + "</ul>" if found else "<p>no rule fired</p>"}</div>')


def _batch_columns(analysis) -> dict[str, np.ndarray]:
    """The batches table's columns (as `Capture.batches` names them), from analyze's per-batch table."""
    bt = analysis.batch_table
    dur = bt["end"] - bt["start"]
    out = {"batch": np.arange(len(bt)), "size": bt["size"], "duration_ms": dur / 1e6,
           **{c: bt[c] for c in bt.columns if c.endswith("_ns") or c in BATCH_KEYS}}
    if "gpu_busy_ns" in bt:
        out["gpu_busy_fraction"] = bt["gpu_busy_ns"] / np.maximum(dur, 1)
    return out


def render_html(cap, *, first_batch: int = 0, n_batches: int = 4, title: str | None = None) -> str:
    """The report of one capture as one HTML string: `cap` is an `Analysis`, a `Capture` of the
    data model (its analysis is used) or a path (analyzed here, without row-level tables)."""
    from ..base.defaults import VERSION as __version__
    from . import svg
    from .text import COUNT_COLUMNS, CUDA_COLUMNS, HOST_COLUMNS, fmt, headline, stage_rows

    if isinstance(cap, (str, os.PathLike)):
        from ..analyze.pipeline import analyze

        cap = analyze(os.fspath(cap))
    cap = getattr(cap, "analysis", cap)
    r = cap.result
    name = title or os.path.basename(cap.path)
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<title>clef-prof report: {_e(name)}</title><style>{_CSS}</style></head><body>",
             f"<h1>clef-prof report: <code>{_e(name)}</code></h1>",
             f"<p class=\"path mono\">{_e(cap.path)}</p>"]
    parts.append("<ul class=\"headline\">" + "".join(f"<li>{_e(line.strip())}</li>" for line in headline(r)) + "</ul>")
    for w in r.warnings:
        parts.append(f'<div class="warn"><b>warning:</b> {_e(w)}</div>')

    # key figures per request
    pr, ov = r.per_request, r.overlap
    src = r.requests_source or ""
    keys = [("requests", r.requests, "int",
             src if src in ("", "--requests") else f"rows scheduled in batch ranges ({src}), not requests finished"),
            ("batches", r.batches, "int", "batch ranges"),
            ("host ms / request", pr.pooler_host_ms, "ms", f"{r.config.batch} span / requests")]
    if r.capture.cuda_traced:
        keys += [("H2D copies / request", pr.h2d_copies, "f2", f"{fmt(pr.h2d_bytes, 'f0')} B / request"),
                 ("kernel launches / request", pr.kernel_launches, "f2",
                  f"{fmt(pr.graph_launches, 'f2')} graph launches / request"),
                 ("D2H copies / request", pr.d2h_copies, "f2", "device to host"),
                 ("GPU busy in batch span", None if ov.gpu_busy_fraction_of_pooler_span is None else
                  100 * ov.gpu_busy_fraction_of_pooler_span, "pct1",
                  f"{fmt(ov.gpu_busy_ms_per_request, 'ms')} GPU ms / request")]
    cards = "".join(f"<div><span>{_e(k)}</span><b>{_e(fmt(v, kind) if kind != 'pct1' else _pct1(v))}</b>"
                    f"<span>{_e(sub)}</span></div>" for k, v, kind, sub in keys)
    parts.append(f"<h2>Per request</h2><div class=\"key\">{cards}</div>")

    # stage tables (the terminal report's columns)
    def rows(cols):
        return [[sname, *(fmt(get(figures), kind) for get, _, kind in cols)] for sname, figures in stage_rows(r)]

    parts.append("<h2>Host time per stage</h2>")
    parts.append(_table(["stage", *(h for _, h, _ in HOST_COLUMNS)], rows(HOST_COLUMNS),
                        total_last=bool(r.pooler.instances)))
    if r.capture.cuda_traced:
        parts.append("<h2>CUDA work per stage</h2><p>placed by the launching API call; /req = per request</p>")
        parts.append(_table(["stage", *(h for _, h, _ in CUDA_COLUMNS)], rows(CUDA_COLUMNS),
                            total_last=bool(r.pooler.instances)))

    # plots
    if r.batches:
        n_b = min(n_batches, r.batches)
        try:
            tl = svg.timeline(cap, first_batch, n_b)
        except ClefError as exc:
            parts.append(f'<div class="warn">timeline: {_e(exc)}</div>')
        else:
            cap_text = (f"{len(tl.batches)} consecutive batches (#{tl.batches[0]}–#{tl.batches[-1]}), "
                        f"{tl.requests} requests. Host lanes: the batch range and each stage. ")
            if r.capture.cuda_traced:
                cap_text += (f"GPU lanes: one tick per copy record ({tl.h2d_marks} H2D = "
                             f"{tl.h2d_per_request:.2f} per request; red pageable, green pinned), kernels, "
                             "graphs, and the union of GPU work; grey is work launched outside these batches. ")
                if tl.zoom:
                    cap_text += (f"Below: batch #{tl.zoom['batch']} (n={tl.zoom['size']}), stage "
                                 f"{tl.zoom['stage']}, every H2D copy numbered.")
            parts.append("<h2>Timeline and findings</h2><div class=\"side\">"
                         + _figure([tl.svg, *([tl.zoom_svg] if tl.zoom_svg else [])], cap_text) + _findings(r)
                         + "</div>")
        parts.append("<h2>Host time per stage, distribution</h2>" + _figure(
            [svg.stage_durations(cap)], "one point per batch (each stage's instances in a batch summed); "
            "boxes: quartiles and median, whiskers to the furthest batch within 1.5 IQR; log scale"))

    if r.journey is not None and getattr(cap, "journeys", None) is not None:
        parts.append(_journey_section(cap, svg))
    if getattr(cap, "sample_counts", None) is not None:
        parts.append(_samples_section(cap, svg))

    if not any(p.startswith("<h2>Timeline and findings") for p in parts):
        parts.append("<h2>Findings</h2>" + _findings(r))

    if r.capture.cuda_traced:       # the counts the per-request table leaves out, after the pictures
        parts.append("<h2>CUDA calls and GPU records per stage</h2><p>per capture</p>")
        parts.append(_table(["stage", *(h for _, h, _ in COUNT_COLUMNS)], rows(COUNT_COLUMNS),
                            total_last=bool(r.pooler.instances)))

    # threads and batches
    th = [[t.pid, t.tid, t.process or "", t.thread or "", t.batches, sum(t.stage_instances.values())]
          for t in r.capture.threads]
    if th:
        parts.append("<h2>Threads with stage ranges</h2>")
        parts.append(_table(["pid", "tid", "process", "thread", "batches", "stage_instances"], th, num_from=99))
    b = _batch_columns(cap)
    n_rows = len(b["batch"])
    if n_rows:
        cols = [c for c in ["batch", "size", "duration_ms", *(f"{s}_ns" for s in cap.config.stages), "h2d_copies",
                            "kernel_launches", "graph_launches", "gpu_busy_fraction"] if c in b]
        shown = range(min(n_rows, 50))

        def cell(c, v):
            if c.endswith("_ns"):
                return fmt(v / 1e6, "ms")
            if c == "duration_ms":
                return fmt(v, "ms")
            if c == "gpu_busy_fraction":
                return _pct1(100 * v)
            return fmt(v, "int")

        heads = [c[:-3] + " ms" if c.endswith("_ns") else ("ms" if c == "duration_ms" else
                                                           ("GPU busy" if c == "gpu_busy_fraction" else c))
                 for c in cols]
        parts.append(f"<h2>Batches</h2><details><summary>first {len(shown)} of {n_rows} batches</summary>")
        parts.append(_table(heads, [[cell(c, b[c][i]) for c in cols] for i in shown], num_from=0))
        parts.append("</details>")

    cfg = r.capture
    parts.append(f"<footer>clef-prof {_e(__version__)} · nsys {_e(cfg.nsys_version or '?')}, schema "
                 f"{_e(cfg.schema_version or '?')} · generated "
                 f"{_e(datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}</footer></body></html>")
    return "\n".join(parts) + "\n"


def _journey_section(cap, svg) -> str:
    """The request journeys: the segment table (per request, ms) and a waterfall of the p50 request
    and the p99+ tail."""
    from .text import journey_head, journey_rows, _jms, _jpct

    r = cap.result
    out = ["<h2>Request journeys</h2><ul class=\"headline\">"
           + "".join(f"<li>{_e(line.strip())}</li>" for line in journey_head(r)) + "</ul>"]
    out.append(_table(["segment", "mean ms", "p50 ms", "p99 ms", "share", "tail mean ms", "tail share"],
                      [[name.replace("  ", "↳ "), _jms(f.mean_ms), _jms(f.p50_ms), _jms(f.p99_ms), _jpct(f.share_pct),
                        _jms(f.tail_mean_ms), _jpct(f.tail_share_pct)] for name, f in journey_rows(r)]))
    if r.journey.complete:
        try:
            pic, info = svg.waterfall(cap, "p50,p99")
        except ClefError as exc:
            out.append(f'<div class="warn">waterfall: {_e(exc)}</div>')
        else:
            out.append(_figure([pic], f"{info['rows']} requests, the p50 one and the p99+ tail ({r.journey.tail_requests}"
                                      " at or above the p99 of end-to-end), slowest last: each row from its handler's "
                                      "entry to its exit, its segments on the handler's thread and its batch's "
                                      "stages under them on the batch's thread"))
    return "".join(out)


def _samples_section(cap, svg) -> str:
    """Python samples: an icicle per stage with samples (and "(batch)"), under analyze's header line."""
    from ..analyze.figures.samples import OUTSIDE_SLOT
    from .text import samples_head

    sc, s = cap.sample_counts, cap.result.samples
    out = ["<h2>Python functions per stage (sampled)</h2><ul class=\"headline\">"
           + "".join(f"<li>{_e(line.strip())}</li>" for line in samples_head(cap.result)) + "</ul>"]
    for slot, st in s.stages.items():
        if slot == OUTSIDE_SLOT or not st.samples:
            continue
        ms = "" if st.ms_per_request is None else f", {st.ms_per_request:.3f} ms per request"
        few = " (few samples: shares are not a measurement)" if st.few else ""
        unit = "ns" if sc.unit == "ns" else "samples"
        what = "function self time (ns, from python_function events)" if unit == "ns" else "samples"
        out.append(_figure([svg.flame(sc, slot, f"{slot}: {st.samples:,} {unit}{ms}{few}", unit=unit)],
                           f"the outermost Python frame at the top, callees below; each box is as wide as the {what} "
                           "whose stack passes through it (inclusive); hover for function, file, amount and share"))
    outside = s.stages.get(OUTSIDE_SLOT)
    if outside is not None and outside.samples:
        out.append(f"<p>{outside.samples:,} {'ns' if sc.unit == 'ns' else 'samples'} in no batch range (idle threads, "
                   "start-up) are not drawn.</p>")
    return "".join(out)


def write_html(cap, path: str, inputs=(), **kw) -> str:
    """Render and write the report (never over one of `inputs`); returns the path."""
    from ..base.safeio import write_text

    write_text(path, render_html(cap, **kw), inputs)
    return path
