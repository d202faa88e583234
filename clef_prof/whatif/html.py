"""The what-if's HTML page: per stage and metric, the response against added host time, as inline
SVG drawn with explore's SVG helpers (self-contained, no script): every server a dot (its
metric in % of the baseline servers' mean), the fitted line over the linear range with its
interval band (the slope's interval, the line pinned at the baseline), the linear range's top
as a dashed line, and servers past a bend drawn hollow.

Each picture is `<svg data-stage data-metric data-verdict>`; each server a `<circle
class="server fit|past-bend" data-x data-y>`; the band a `<path class="band">`: for tests."""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from clef_prof.explore.html import _CSS, _e, _table
from clef_prof.explore.svg import _n, _Svg, _tick_label, _ticks
from clef_prof.whatif.model import Observation, WhatIf
from clef_prof.whatif.words import NAMES, _g, _iv, _statements, verdict_text
from clef_prof.whatif.slopes import stage_arrays

W, H = 560, 300
L, R, T, B = 64, 16, 28, 46


def _plot(sl, x: np.ndarray, y: np.ndarray, groups: np.ndarray, uid: str) -> str:
    name = NAMES.get(sl.metric, sl.metric)
    pct = 100 * (y / sl.baseline_mean - 1)
    xmax = float(x.max()) * 1.05 or 1.0
    fit = groups < sl.levels
    band = [] if sl.verdict == "too few servers" else [sl.pct_lo * xmax, sl.pct_hi * xmax]
    lo, hi = min(pct.min(), *band, 0.0), max(pct.max(), *band, 0.0)
    pad = (hi - lo) * 0.08 or 1.0
    lo, hi = lo - pad, hi + pad
    X = lambda v: L + (W - L - R) * v / xmax                       # noqa: E731
    Y = lambda v: T + (H - T - B) * (hi - v) / (hi - lo)           # noqa: E731
    svg = _Svg(W, H, uid, f"{sl.stage}: {name} against added host time",
               f"{len(x)} servers; slope {_g(sl.pct_per_ms)}% {name} per +1 ms/request "
               f"{_iv(sl.pct_lo, sl.pct_hi)}; {verdict_text(sl)}")
    svg.parts[0] = svg.parts[0].replace("<svg ", f'<svg data-stage="{_e(sl.stage)}" data-metric="{_e(sl.metric)}" '
                                        f'data-verdict="{_e(sl.verdict)}" ', 1)
    for v in _ticks(lo, hi, 6):
        svg.add(f'<line x1="{L}" x2="{W - R}" y1="{_n(Y(v))}" y2="{_n(Y(v))}" stroke="#eee"/>')
        svg.text(L - 6, Y(v) + 3.5, _tick_label(v), anchor="end", size=10)
    for v in _ticks(0, xmax, 6):
        svg.text(X(v), H - B + 15, _tick_label(v), anchor="middle", size=10)
    svg.add(f'<line x1="{L}" x2="{W - R}" y1="{_n(Y(0))}" y2="{_n(Y(0))}" stroke="#999"/>')
    svg.text((L + W - R) / 2, H - 10, "added host time, ms per request", anchor="middle")
    svg.text(12, T - 10, f"{name}, % of the baseline", size=11)
    if sl.verdict != "too few servers":
        top = sl.linear_max_ms
        svg.add(f'<path class="band" d="M{_n(X(0))} {_n(Y(0))}L{_n(X(top))} {_n(Y(sl.pct_lo * top))}'
                f'L{_n(X(top))} {_n(Y(sl.pct_hi * top))}Z" fill="#4c78a8" fill-opacity="0.18">'
                f'<title>{_e(f"interval: {_iv(sl.pct_lo, sl.pct_hi)}% per +1 ms/request")}</title></path>')
        svg.add(f'<line class="fit" x1="{_n(X(0))}" y1="{_n(Y(0))}" x2="{_n(X(top))}" '
                f'y2="{_n(Y(sl.pct_per_ms * top))}" stroke="#1f4e79" stroke-width="1.6"/>')
        svg.add(f'<line class="linear-max" x1="{_n(X(top))}" x2="{_n(X(top))}" y1="{T}" y2="{H - B}" '
                'stroke="#b00020" stroke-dasharray="4 3"/>')
        svg.text(X(top) - 4, T + 10, f"linear to +{top:.3g}", anchor="end", size=10)
    for xi, yi, f in zip(x, pct, fit):
        cls = "fit" if f else "past-bend"
        fill = 'fill="#1f4e79"' if f else 'fill="none" stroke="#b00020"'
        svg.add(f'<circle class="server {cls}" data-x="{xi:.6g}" data-y="{yi:.6g}" cx="{_n(X(xi))}" '
                f'cy="{_n(Y(yi))}" r="3.2" {fill}><title>+{xi:.3g} ms/request: {yi:+.3g}%</title></circle>')
    return svg.done()


def render_html(result: WhatIf, observations: list[Observation], title: str = "clef-prof what-if") -> str:
    """The page: the slopes table, the statements, one plot per stage and metric."""
    rows = [[sl.stage, NAMES.get(sl.metric, sl.metric), _g(sl.pct_per_ms), _iv(sl.pct_lo, sl.pct_hi),
             _g(sl.pct_per_pct), verdict_text(sl)] for s in result.stages for sl in s.slopes]
    body = [f"<h1>{_e(title)}</h1>",
            f"<p class=path>{result.baseline_servers} baseline servers; {result.confidence:.0%} intervals "
            "over servers as units; slopes in % of the baseline's figure per +1 ms/request of added host time</p>",
            _table(["stage", "metric", "% per +1 ms/request", f"{result.confidence:.0%} interval",
                    "% per +1% of the stage", "verdict"], rows, num_from=2),
            "<ul class=headline>" + "".join(f"<li>{_e(t)}</li>" for t in _statements(result)) + "</ul>"]
    k = 0
    for s in result.stages:
        body.append(f"<h2>{_e(s.stage)} ({s.stage_ms_per_request:.3g} ms/request of its own host time)</h2>"
                    "<div class=side>")
        for sl in s.slopes:
            arrays = stage_arrays(observations, s.stage, sl.metric)
            if arrays is None:
                continue
            x, y, groups, _ = arrays
            k += 1
            body.append(f"<figure>{_plot(sl, x, y, groups, f'w{k}')}<figcaption>"
                        f"{_e(NAMES.get(sl.metric, sl.metric))}: dots are servers; the band is the slope's "
                        f"interval from the baseline; hollow dots lie past the bend</figcaption></figure>")
        body.append("</div>")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}<footer>clef-prof what-if, {stamp}</footer>"
            "</body></html>\n")
