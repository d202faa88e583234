"""`clef-prof history DB --html trends.html`: one self-contained page, one small SVG chart per series.

Drawn as the report's pictures are (clef_prof.explore.svg: the same element builder, ticks and
font; no matplotlib, no script, nothing fetched): each result a dot (its value, commit and time
in its tooltip), each segment between change points a level line, each change point a dashed
red line between the two results it falls between, whose tooltip (`<title>`) gives its size and
commit range. Every chart is a `<figure data-series=NAME>`, every change mark a
`<g class="change" data-index=I>`, so that a test can count what was drawn.
"""
from __future__ import annotations

import html
from datetime import datetime, timezone

import numpy as np

from ..explore.svg import _e, _n, _Svg, _tick_label, _ticks
from .render import change_text, head_lines
from .trends import History, Series, fmt

W, H = 520, 190
LEFT, RIGHT, TOP, BOTTOM = 64, 14, 28, 30
CHANGE = "#c44e52"
DOT = "#4c72b0"
LEVEL = "#55a868"

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1400px;
color:#1d1d1f;background:#fff;padding:0 16px;line-height:1.4}
h1{font-size:22px;margin:0 0 4px}p.head{color:#555;margin:2px 0}
.grid{display:flex;flex-wrap:wrap;gap:14px;margin-top:14px}
figure{margin:0;flex:0 1 520px}figure svg{display:block;width:100%;height:auto;border:1px solid #e4e4e4}
figcaption{color:#555;font-size:12px;margin-top:3px}
footer{color:#777;font-size:12px;margin:32px 0 8px}
"""


def chart(s: Series, label_id: str) -> str:
    """One series as an SVG: dots, segment levels, change points."""
    v = s.values
    n = len(v)
    lo, hi = float(v.min()), float(v.max())
    pad = (hi - lo) * 0.08 or (abs(hi) * 0.05 or 1.0)
    lo, hi = lo - pad, hi + pad
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x_of(i):
        return LEFT + (np.asarray(i, dtype=np.float64) + 0.5) * pw / max(n, 1)

    def y_of(val):
        return TOP + ph - (np.asarray(val, dtype=np.float64) - lo) * ph / (hi - lo)

    unit = "" if s.unit == "fraction" else s.unit
    desc = (f"{n} results, newest {fmt(v[-1], s.unit)} {unit}; "
            + (f"{len(s.changes)} change point(s): " + "; ".join(change_text(s, c) for c in s.changes)
               if s.changes else "no change point"))
    svg = _Svg(W, H, label_id, s.name, desc)
    svg.text(LEFT, 16, s.name, size=11)
    for t in _ticks(lo, hi, 4):
        y = float(y_of(t))
        svg.add(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{_n(y)}" y2="{_n(y)}" stroke="#eee"/>')
        svg.text(LEFT - 4, y + 3.5, _tick_label(100 * t if s.unit == "fraction" else t), anchor="end", size=9)
    svg.add(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999" stroke-width="0.6"/>')
    svg.text(LEFT + pw / 2, H - 8, f"results in time order ({'%' if s.unit == 'fraction' else unit})",
             anchor="middle", size=9)
    bounds = [0, *(c.index for c in s.changes), n]
    levels = []
    for a, b in zip(bounds, bounds[1:]):
        seg = v[a:b]
        lv = float(np.exp(np.log(seg).mean())) if s.scale == "log" else float(seg.mean())
        levels.append(f'<line class="level" x1="{_n(float(x_of(a - 0.4)))}" x2="{_n(float(x_of(b - 0.6)))}" '
                      f'y1="{_n(float(y_of(lv)))}" y2="{_n(float(y_of(lv)))}" stroke="{LEVEL}" stroke-width="1.6"/>')
    svg.add("".join(levels))
    for c in s.changes:
        x = float(x_of(c.index - 0.5))
        tip = change_text(s, c)
        svg.add(f'<g class="change" data-index="{c.index}"><title>{_e(tip)}</title>'
                f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{TOP}" y2="{TOP + ph}" stroke="{CHANGE}" stroke-width="1.4" '
                f'stroke-dasharray="4 3"/><rect x="{_n(x - 4)}" y="{TOP}" width="8" height="{ph}" fill="{CHANGE}" '
                f'fill-opacity="0.08"/></g>')
    xs, ys = x_of(np.arange(n)), y_of(v)
    r = 2.6 if n <= 60 else 1.8
    svg.add('<g class="points">' + "".join(
        f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{r}" fill="{DOT}"><title>{_e(_point_tip(s, i))}</title></circle>'
        for i, (x, y) in enumerate(zip(xs, ys))) + "</g>")
    return svg.done()


def _point_tip(s: Series, i: int) -> str:
    p = s.points[i]
    unit = "" if s.unit == "fraction" else f" {s.unit}"
    return (f"result #{p.id}: {fmt(p.value, s.unit)}{unit}; commit {p.commit or '?'}"
            f"{f' ({p.branch})' if p.branch else ''}; {p.time[:19].replace('T', ' ')}")


def render_page(h: History) -> str:
    from ..base.defaults import VERSION

    title = f"clef-prof history: {h.path}"
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             '<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>clef-prof history: <code>{html.escape(h.path)}</code></h1>"]
    parts += [f'<p class="head">{_e(line)}</p>' for line in head_lines(h)]
    parts.append('<div class="grid">')
    for i, s in enumerate(h.series):
        cap = (f"{len(s.changes)} change point(s); hover a dashed line for its size and commit range"
               if s.changes else "no change point")
        parts.append(f'<figure data-series="{_e(s.name)}">{chart(s, f"s{i}")}<figcaption>{_e(cap)}</figcaption>'
                     "</figure>")
    parts.append("</div>")
    if not h.series:
        parts.append("<p>no series (the store holds no figures that match)</p>")
    parts.append(f"<footer>clef-prof {_e(VERSION)} · generated "
                 f"{_e(datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}</footer></body></html>")
    return "\n".join(parts) + "\n"


def write_page(h: History, path: str, inputs=()) -> str:
    from ..base.safeio import write_text

    write_text(path, render_page(h), inputs)
    return path
