"""Presentation of a `WhatIf` and of a `Prediction`: terminal text (80 columns, numbers never cut:
long statements wrap between words), Markdown and JSON; the HTML plot is in `whatif.html`;
the words both use are in `whatif.words`."""
from __future__ import annotations

import dataclasses
import json
import textwrap

from clef_prof.whatif.model import WhatIf
from clef_prof.whatif.words import NAMES, _g, _iv, _statements

WIDTH = 80
PREDICT_SCHEMA = "clef-prof/predict/1"
REPORT_SCHEMA = "clef-prof/whatif-report/1"     # the report; the --save file is clef-prof/whatif/1


def _clean(v):
    """NaN (no estimate) becomes null so the JSON stays valid."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return None if isinstance(v, float) and v != v else v


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def _table(rows: list[tuple[str, ...]], fmt: str) -> list[str]:
    if fmt == "markdown":
        return (["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
                + ["| " + " | ".join(r) + " |" for r in rows[1:]])
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]


def render(result: WhatIf, fmt: str, observations=None) -> str:
    """`fmt`: "text", "markdown", "json" or "html" (needs the `observations`: its plots show every
    server)."""
    if fmt == "html":
        from clef_prof.whatif.html import render_html
        if observations is None:
            raise ValueError("the HTML page plots the servers: pass the observations")
        return render_html(result, observations)
    if fmt == "json":
        return json.dumps({"schema": REPORT_SCHEMA, **_clean(dataclasses.asdict(result))}, indent=2,
                          allow_nan=False)
    if fmt not in ("text", "markdown"):
        raise ValueError(f"unknown format {fmt!r}: use text, markdown, json or html")
    ci = f"{result.confidence:.0%} interval"
    title = ("Response of each serving metric to host time added to a stage, in % of the baseline "
             f"servers' figure per +1 ms/request ({result.baseline_servers} baseline servers"
             + (f", {result.failed_servers} failed" if result.failed_servers else "") + ")")
    lines = _wrap(title, "")
    for s in result.stages:
        rows = [("metric", "% per +1 ms/req", ci, "% per +1%", "verdict")]
        for sl in s.slopes:
            rows.append((NAMES.get(sl.metric, sl.metric), _g(sl.pct_per_ms), _iv(sl.pct_lo, sl.pct_hi),
                         _g(sl.pct_per_pct), sl.verdict))
        lines += ["", f"{s.stage} ({s.stage_ms_per_request:.3g} ms/request of its own host time):", ""]
        lines += _table(rows, fmt)
    lines.append("")
    for t in _statements(result):
        lines += [f"- {t}"] if fmt == "markdown" else _wrap(t)
    if result.drift:
        lines += _wrap(f"drift: {result.drift}")
    return "\n".join(lines) + "\n"


def render_prediction(pred, fmt: str) -> str:
    """The predicted-vs-measured table: per metric, each stage's term, the total, bench's
    measured change and the share the stages explain."""
    if fmt == "json":
        return json.dumps({"schema": PREDICT_SCHEMA, **_clean(dataclasses.asdict(pred))}, indent=2,
                          allow_nan=False)
    if fmt not in ("text", "markdown"):
        raise ValueError(f"unknown format {fmt!r}: use text, markdown or json")
    ci = f"{pred.confidence:.0%} interval"
    lines = _wrap(f"Serving change of {pred.arm} vs {pred.baseline} predicted from its stage "
                  "changes (compare) and the slopes measured on "
                  f"{pred.baseline} (what-if), in % of {pred.baseline}'s figure", "") + [""]
    for m in pred.metrics:
        rows = [("stage", "change ms/req", "% per +1 ms/req", "predicted %", ci)]
        for t in m.terms:
            rows.append((t.stage, _g(t.change_ms), _g(t.slope_pct_per_ms),
                         _g(t.pct) if t.refused is None else "refused",
                         _iv(t.lo, t.hi, "no interval" if t.refused is None else "—")))
        rows.append(("total", "", "", _g(m.pct) if m.refused is None else "refused",
                     _iv(m.lo, m.hi, "no interval" if m.refused is None else "—")))
        if m.measured is not None:
            rows.append(("measured", "", "", _g(m.measured.pct), _iv(m.measured.lo, m.measured.hi)))
        if m.unexplained is not None:
            rows.append(("unexplained", "", "", _g(m.unexplained[0]), _iv(*m.unexplained[1:])))
        lines += [f"{NAMES.get(m.metric, m.metric)} (% of {pred.baseline}'s figure):", ""]
        lines += _table(rows, fmt) + [""]
    said = []
    for m in pred.metrics:
        name = NAMES.get(m.metric, m.metric)
        for t in m.terms:
            if t.refused:
                said.append(f"{name}, {t.stage}: not predicted: {t.refused}")
        if m.measured is not None and m.pct is not None:
            s = (f"{name}: {', '.join(t.stage for t in m.terms)} explain{'s' if len(m.terms) == 1 else ''} "
                 f"{_g(m.pct)}% {_iv(m.lo, m.hi)} of {_g(m.measured.pct)}% "
                 f"{_iv(m.measured.lo, m.measured.hi)} measured ({m.measured.verdict})")
            if m.unexplained is not None:
                s += f"; unexplained {_g(m.unexplained[0])}% {_iv(*m.unexplained[1:])}"
            said.append(s)
    for t in said + [f"note: {n}" for n in pred.notes]:
        lines += [f"- {t}"] if fmt == "markdown" else _wrap(t)
    return "\n".join(lines) + "\n"
