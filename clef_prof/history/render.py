"""The history report as terminal text (fits the width, never cuts a number), Markdown and JSON,
and the gate's one-line verdicts."""
from __future__ import annotations

import json

from ..explore.termtable import Column, table, width, wrap
from .trends import Change, GateLine, History, Series, fmt


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _when(t: str) -> str:
    return t[:16].replace("T", " ")


def change_text(s: Series, c: Change) -> str:
    """One change point in words: its size, its interval, its levels, where it falls."""
    unit = "" if s.unit == "fraction" else f" {s.unit}"
    ci = f" [{_pct(c.ci_pct[0])}, {_pct(c.ci_pct[1])}]" if c.ci_pct else ""
    how = "exact change" if c.exact else f"p {c.p:.3g}"
    kind = "regression" if c.regression else "improvement"
    new = "; new with the newest results" if c.new else ""
    return (f"{_pct(c.change_pct)}{ci} ({kind}, {how}): {fmt(c.before, s.unit)} -> {fmt(c.after, s.unit)}{unit}, "
            f"between results #{c.from_id} and #{c.to_id} ({_when(c.from_time)} -> {_when(c.to_time)}), "
            f"commits {c.commit_range}{new}")


def head_lines(h: History) -> list[str]:
    m = h.method
    shown = f"{len(h.series)} series" + (f" (the newest {m['last']} points of each)" if m["last"] else "")
    filt = ", ".join(f"{k} {v}" for k, v in h.filters.items() if v is not None)
    return [f"clef-prof history {h.path}: {h.results} results{f' ({filt})' if filt else ''}; {shown}",
            f"change points: e-divisive means at {100 * m['sig_level']:g}% a series ({m['permutations']} "
            f"permutations, seed {m['seed']}), on log values where all are positive; exact counts: any change "
            f"of value"]


def gate_lines(h: History) -> list[str]:
    """The gate's verdicts, one line each, and its family's false-alarm bound."""
    g = h.gate
    if g is None:
        return []
    by = {s.name: s for s in h.series}
    out = []
    if not g.lines:
        out.append(f"history gate: no series matches {', '.join(g.metrics)}: not judged")
    for ln in g.lines:
        out.append(_gate_line(ln, by.get(ln.series)))
    if g.family:
        out.append(f"history gate: {g.family} noisy series judged at {100 * g.level:g}% each: family-wise false-alarm "
                   f"rate at most {100 * g.family_bound:g}% (Bonferroni; exact counts add none)")
    return out


def _gate_line(ln: GateLine, s: Series | None) -> str:
    if not ln.judged:
        return f"history gate: {ln.series}: not judged: {ln.why}"
    if ln.fired and s is not None and ln.change is not None:
        return f"history gate: {ln.series}: fired: new change point {change_text(s, ln.change)}"
    return f"history gate: {ln.series}: passed ({ln.points} results, no new change point)"


def render_terminal(h: History, cols: int | None = None) -> str:
    cols = cols or width()
    out: list[str] = []
    for line in head_lines(h):
        out += wrap(line, cols, indent="  ")
    out.append("")
    if not h.series:
        out.append("no series (the store holds no figures that match)")
        return "\n".join(out) + "\n"
    rows = []
    for s in h.series:
        last = s.points[-1]
        rows.append([s.name, str(len(s.points)), fmt(last.value, s.unit), "" if s.unit == "fraction" else s.unit,
                     str(len(s.changes)) if s.changes or not s.exact else "0"])
    out += table([Column("series", "left"), Column("results"), Column("newest"), Column("unit", "left"),
                  Column("change points")], rows, cols)
    changed = [(s, c) for s in h.series for c in s.changes]
    if changed:
        out += ["", "Change points (newest last):"]
        for s, c in changed:
            out += wrap(f"{s.name}: {change_text(s, c)}", cols, indent="    ", first="  ")
    for n in h.notes:
        out += wrap(f"note: {n}", cols, indent="  ")
    return "\n".join(out) + "\n"


def render_markdown(h: History) -> str:
    from ..explore.markup import md as cell

    out = [f"### {line}" if i == 0 else line for i, line in enumerate(head_lines(h))]
    out.append("")
    if h.series:
        out += ["| series | results | newest | unit | change points |", "|---|---:|---:|---|---:|"]
        for s in h.series:
            out.append(f"| {cell(s.name)} | {len(s.points)} | {fmt(s.points[-1].value, s.unit)} | "
                       f"{cell('' if s.unit == 'fraction' else s.unit)} | {len(s.changes)} |")
        changed = [(s, c) for s in h.series for c in s.changes]
        if changed:
            out += ["", "**Change points**", ""]
            out += [f"- {cell(s.name, code=True)}: {cell(change_text(s, c))}" for s, c in changed]
    else:
        out.append("no series (the store holds no figures that match)")
    if h.gate is not None:
        out += ["", "**Gate**", ""] + [f"- {cell(line)}" for line in gate_lines(h)]
    for n in h.notes:
        out.append(f"\n_note: {cell(n)}_")
    return "\n".join(out) + "\n"


def render_json(h: History) -> str:
    return json.dumps(h.to_json(), indent=2) + "\n"
