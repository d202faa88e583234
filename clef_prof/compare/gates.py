"""`clef-prof compare`: did the change move the numbers beyond noise?

    clef-prof compare --arm main=a.sqlite,b.sqlite --arm pr='runs/pr-*.sqlite' [--fail-if EXPR ...]
    clef-prof compare AB_DIR

The first arm is the baseline. Every per-request metric of analyze is compared: each arm's
figure, the change (absolute and %), and a seeded two-level bootstrap interval of the change
(see `comparison` and `bootstrap`). Gates (`--fail-if`) turn a change into exit code 1.

This module only parses, gates and renders; it imports NumPy/pandas (through `comparison`)
when the command runs, never when the CLI builds its parser.
"""
from __future__ import annotations

import json
import math
import operator
import re
import sys
from dataclasses import dataclass

from .arm import CompareError
from ..analyze.markup import md

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_GATE = re.compile(r"^\s*(?P<metric>[^\s<>=]+)\s*(?P<op>>=|<=|>|<)\s*"
                   r"(?P<value>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<pct>%)?\s*$")


# ---------------------------------------------------------------------------------------------
# gates


@dataclass(frozen=True)
class Gate:
    """`METRIC OP VALUE[%]` on the change from the baseline (arm - baseline)."""

    text: str
    metric: str          # canonical metric name
    op: str
    value: float
    pct: bool


def parse_gate(text: str, known: dict[str, str]) -> Gate:
    m = _GATE.match(text)
    if not m:
        raise CompareError(f"--fail-if {text!r}: expected METRIC OP VALUE or METRIC OP VALUE% with OP one of "
                           "> >= < <= (e.g. \"stages.index.host_ms_per_request > +5%\", \"per_request.h2d_copies > 0\")")
    name = m["metric"]
    if name not in known:
        import difflib

        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise CompareError(f"--fail-if {text!r}: unknown metric {name!r}{hint}; `clef-prof compare --list-metrics` "
                           "lists them")
    return Gate(text.strip(), known[name], m["op"], float(m["value"]), bool(m["pct"]))


def evaluate_gates(gates: list[Gate], comp: dict, gate_on: str = "ci") -> list[dict]:
    """One verdict per gate and non-baseline arm.

    Exact (deterministic) metrics compare their exact change. Others, with gate_on="ci" (the
    default), fire only when the whole confidence interval of the change is beyond the threshold:
    the interval's low end for > and >=, its high end for < and <=. Below 3 units (captures,
    servers) per arm there is no such interval: compare then uses its within-capture interval
    (basis "within": batch noise of the recorded runs only, labelled so), bench does not fire
    (basis "too few"). gate_on="point" uses the point change instead (noisier: a host-time gate
    may then fire on noise).
    """
    by_name = {m["metric"]: m for m in comp["metrics"]}
    out = []
    for g in gates:
        entry = by_name.get(g.metric)
        if entry is None:
            why = ("CUDA was not traced in these captures" if not _is_host(g.metric)
                   else "its stage has no range in these captures")
            raise CompareError(f"--fail-if {g.text!r}: metric {g.metric} is not available ({why})")
        for arm in list(entry["arms"])[1:]:
            a = entry["arms"][arm]
            point = a["change_pct"] if g.pct else a["change"]
            if point is None:          # % of a zero baseline: +/- infinity
                point = math.copysign(math.inf, a["change"]) if a["change"] else 0.0
            ci = a["ci_pct"] if g.pct else a["ci"]
            within = a.get("ci_within_pct") if g.pct else a.get("ci_within")
            if entry["deterministic"]:
                basis, value = "exact", point
            elif gate_on == "point":
                basis, value = "point", point
            elif ci is not None:
                basis, value = "ci", ci[0] if g.op in (">", ">=") else ci[1]
            elif within is not None:
                basis, value = "within", within[0] if g.op in (">", ">=") else within[1]
            else:
                basis, value = "too few", None
            fired = value is not None and bool(_OPS[g.op](value, g.value))
            out.append({"gate": g.text, "metric": g.metric, "arm": arm, "baseline": comp["baseline"],
                        "op": g.op, "fired": fired, "basis": basis,
                        "value": value if value is not None and math.isfinite(value) else None,
                        "threshold": g.value, "pct": g.pct, "change": a["change"], "change_pct": a["change_pct"],
                        "ci": a["ci"], "ci_pct": a["ci_pct"], "ci_within": a.get("ci_within"),
                        "ci_within_pct": a.get("ci_within_pct"), "verdict": a.get("verdict")})
    return out


def _is_host(metric: str) -> bool:
    return metric.endswith("host_ms_per_request") or metric == "per_request.pooler_host_ms"


def gate_line(v: dict, kind: str) -> str:
    """`gate fired: EXPR — pr vs main: change +134.2%, CI [+123.1%, +146.4%]: low end +123.1% > +5%`"""
    pct = v["pct"]
    point = v["change_pct"] if pct else v["change"]
    if point is None:
        point = v["value"] if v["value"] is not None else (math.inf if v["change"] > 0 else -math.inf)
    t = v["threshold"]
    thr = f"{v['op']} " + (f"{t:g}%" if pct else _fmt_change(t, kind) if kind == "fraction" else f"{t:g}")
    shown = "inf" if v["value"] is None else _fmt_change(v["value"], kind, pct)
    if v["basis"] == "exact":
        how = f"exact change {_fmt_change(point, kind, pct)}{'' if v['fired'] else ' is not'} {thr}"
    elif v["basis"] in ("ci", "within"):
        lo, hi = (v["ci_pct"] if pct else v["ci"]) if v["basis"] == "ci" else \
            (v["ci_within_pct"] if pct else v["ci_within"])
        end = "low" if v["op"] in (">", ">=") else "high"
        label = "CI" if v["basis"] == "ci" else "within-capture CI (batch noise of these captures only: too few " \
                                                "captures to judge run-to-run noise)"
        how = (f"change {_fmt_change(point, kind, pct)}, {label} [{_fmt_change(lo, kind, pct)}, "
               f"{_fmt_change(hi, kind, pct)}]: its {end} end {shown}{'' if v['fired'] else ' is not'} {thr}")
    elif v["basis"] == "too few":
        return (f"gate not judged: {v['gate']} — {v['arm']} vs {v['baseline']}: {v.get('verdict') or 'too few units'}"
                f" (point change {_fmt_change(point, kind, pct)}; --gate-on point gates on it)")
    else:
        how = f"point change {shown}{'' if v['fired'] else ' is not'} {thr}"
    return f"gate {'fired' if v['fired'] else 'passed'}: {v['gate']} — {v['arm']} vs {v['baseline']}: {how}"


# ---------------------------------------------------------------------------------------------
# formatting


def _fmt_value(v, kind: str, exact: bool = False) -> str:
    if v is None:
        return "—"
    if kind == "fraction":
        return f"{100 * v:.2f}%"
    if kind in ("count", "bytes"):
        if exact:
            return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"
        return f"{v:,.1f}" if kind == "bytes" else f"{v:.3f}"
    a = abs(v)
    if a >= 1e4:
        return f"{v:,.0f}"
    return f"{v:.4g}" if a >= 1e-4 or a == 0 else f"{v:.2e}"


def _fmt_change(v, kind: str, pct: bool = False) -> str:
    if v is None:
        return "—"
    if not math.isfinite(v):
        return "+inf" if v > 0 else "-inf"
    if pct:
        return f"{v:+.1f}%"
    if kind == "fraction":
        return f"{100 * v:+.2f} pp"
    s = _fmt_value(abs(v), kind, exact=kind in ("count", "bytes") and float(v).is_integer())
    return ("-" if v < 0 else "+") + s


_UNITS = {"host_ms": "ms/req", "gpu_ms": "ms/req", "count": "/req", "bytes": "B/req", "fraction": "% of span"}


def _short(v) -> str:
    return "—" if v is None else f"{v:.3g}"


def _unit(kind: str) -> str:
    return {"host_ms": " ms", "gpu_ms": " ms", "bytes": " B"}.get(kind, "")


def _shown(comp: dict, show_all: bool) -> tuple[list[dict], int]:
    rows, hidden = [], 0
    for m in comp["metrics"]:
        if not show_all and m["deterministic"] and all(a["mean"] == 0 for a in m["arms"].values()):
            hidden += 1
            continue
        rows.append(m)
    return rows, hidden


def _verdict(a: dict, m: dict) -> str:
    if m["deterministic"]:
        return "exact" if a["change"] == 0 else "exact change"
    return a["verdict"]


def _verdict_text(a: dict, m: dict) -> str:
    """The verdict and the smallest change its design could detect (80% power at the measured spread)."""
    v = _verdict(a, m).split(" (")[0]          # the counts behind "too few" are in the method lines
    mdc = a.get("mdc_pct")
    if m["deterministic"] or mdc is None or not math.isfinite(mdc):
        return v
    return f"{v} (detects ±{mdc:.1f}%)"


def _interval(a: dict) -> tuple[list | None, list | None, str]:
    """(ci, ci_pct, label): the interval between captures, else the labelled within-capture one."""
    if a["ci"] is not None:
        return a["ci"], a["ci_pct"], ""
    if a.get("ci_within") is not None:
        return a["ci_within"], a.get("ci_within_pct"), "within-capture "
    return None, None, ""


def _ci_text(a: dict, kind: str) -> str:
    ci, ci_pct, label = _interval(a)
    if ci is None:
        return "exact" if a.get("change") is not None else "—"
    lo, hi = ci
    txt = f"{label}[{_fmt_change(lo, kind)}, {_fmt_change(hi, kind)}]"
    if ci_pct is not None:
        plo, phi = ci_pct
        txt += f" ({_fmt_change(plo, kind, True)} … {_fmt_change(phi, kind, True)})"
    return txt


def _ci_short(a: dict, kind: str) -> str:
    """The interval in % of the baseline where it has one, else in the metric's unit."""
    ci, ci_pct, label = _interval(a)
    if ci is None:
        return "exact"
    if ci_pct is not None:
        lo, hi = ci_pct
        return f"{label}{_fmt_change(lo, kind, True)} … {_fmt_change(hi, kind, True)}"
    lo, hi = ci
    return f"{label}{_fmt_change(lo, kind)} … {_fmt_change(hi, kind)}"


def method_lines(comp: dict) -> list[str]:
    meth = comp["method"]
    arms = comp["arms"]
    who = "; ".join(f"{n}: {a['captures']} capture{'s' if a['captures'] != 1 else ''}, {a['batches']:,} batch "
                    f"instances, {a['requests']:,} requests" for n, a in arms.items())
    low = min(a["captures"] for a in arms.values())
    lines = [f"Method: a capture is the unit that varies from run to run: {100 * meth['confidence']:g}% Welch t "
             f"interval of the change between the arms' per-capture values (a metric per request = Σ metric / "
             f"Σ requests over each capture's batches; on logs where every value is positive, shown as exp(CI) - 1; "
             f"Satterthwaite df); beyond noise = the interval excludes 0; 'detects' = the smallest change this design "
             f"finds 80% of the time at the measured spread. {who}. Exact: counts that are one multiple of the batch "
             f"size in every batch of every capture, shown without interval. p50/p99: host ms per batch instance."]
    if low < meth.get("min_captures", 3):
        lines.append(f"With {low} capture{'s' if low != 1 else ''} in an arm there is no verdict (too few captures to "
                     f"judge; {meth.get('min_captures', 3)} per arm needed): the interval shown is the within-capture "
                     f"bootstrap (batch instances resampled within each capture, B = {meth['B']}, seed {meth['seed']}), "
                     "which covers batch-to-batch noise within these runs, not run-to-run variation.")
    return lines


# ---------------------------------------------------------------------------------------------
# renderers


def render_json(comp: dict) -> str:
    return json.dumps(comp, indent=2) + "\n"


def _gate_basis(comp: dict) -> str:
    if comp["method"].get("gate_on") == "point":
        return "the point change"
    return "fire only when the whole interval is beyond the threshold"


def render_markdown(comp: dict, show_all: bool = False) -> str:
    names = list(comp["arms"])
    base = comp["baseline"]
    rows, hidden = _shown(comp, show_all)
    conf = f"{100 * comp['method']['confidence']:g}%"
    out = []
    for arm in names[1:]:
        out += [f"### clef-prof compare: {md(base)} → {md(arm)}", ""]
        out.append(f"| metric | {md(base)} → {md(arm)} | change | {conf} CI of the change | p50 ms /batch | p99 ms /batch | verdict |")
        out.append("|---|---:|---:|---:|---:|---:|---|")
        for m in rows:
            b, a = m["arms"][base], m["arms"][arm]
            k, ex = m["kind"], m["deterministic"]
            vals = f"{_fmt_value(b['mean'], k, ex)} → {_fmt_value(a['mean'], k, ex)}{_unit(k)}"
            ch = f"{_fmt_change(a['change'], k)}{_unit(k) if k != 'fraction' else ''} ({_fmt_change(a['change_pct'], k, True)})"
            p50 = f"{_fmt_value(b['p50'], 'host_ms')} → {_fmt_value(a['p50'], 'host_ms')}" if "p50" in a else ""
            p99 = f"{_fmt_value(b['p99'], 'host_ms')} → {_fmt_value(a['p99'], 'host_ms')}" if "p99" in a else ""
            verdict = _verdict(a, m)
            if verdict in ("beyond noise", "exact change"):
                ch = f"**{ch}**"
            out.append(f"| {md(m['metric'], code=True)} | {vals} | {ch} | {_ci_text(a, k)} | {p50} | {p99} | "
                       f"{md(_verdict_text(a, m))} |")
        out.append("")
    if hidden:
        out += [f"{hidden} metrics that are exactly 0 in every arm are not shown (`--all` shows them).", ""]
    out += [f"<sub>{md(line)}</sub>" for line in method_lines(comp)]
    if comp.get("gates"):
        kinds = {m["metric"]: m["kind"] for m in comp["metrics"]}
        out += ["", f"Gates (exact counts: exact change; others: {_gate_basis(comp)}):", ""]
        for v in comp["gates"]:
            out.append(f"- **{'fired' if v['fired'] else 'passed'}**: {md(v['gate'], code=True)} — "
                       + md(gate_line(v, kinds[v["metric"]]).split(" — ", 1)[1]))
    from ..analyze.findings import compare_lines
    if comp.get("findings"):
        out += ["", "Findings (per finding: resolved, new or still there):", ""]
        out += [f"- {md(line)}" for line in compare_lines(comp)]
    if comp["notes"]:
        out.append("")
        out += [f"> note: {md(n)}" for n in comp["notes"]]
    if comp["warnings"]:
        out.append("")
        out += [f"> **warning:** {md(w)}" for w in comp["warnings"]]
    return "\n".join(out) + "\n"


def render_terminal(comp: dict, console=None, show_all: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 160)
    names = list(comp["arms"])
    base = comp["baseline"]
    rows, hidden = _shown(comp, show_all)
    conf = f"{100 * comp['method']['confidence']:g}%"
    for n, a in comp["arms"].items():
        console.print(f"[bold]{escape(n)}[/bold]{' (baseline)' if n == base else ''}: {a['captures']} capture(s), "
                      f"{a['batches']:,} batches, {a['requests']:,} requests — {escape(', '.join(a['sources']))}",
                      highlight=False)
    for arm in names[1:]:
        host = [m for m in rows if m["kind"] == "host_ms"]
        other = [m for m in rows if m["kind"] != "host_ms"]
        for title, group, pq in ((f"{escape(base)} → {escape(arm)}: host time, ms per request (p50/p99: ms per batch)", host, True),
                                 (f"{escape(base)} → {escape(arm)}: CUDA work per request, GPU overlap", other, False)):
            if not group:
                continue
            t = Table(title=title, title_justify="left", caption_justify="left")
            t.add_column("metric", no_wrap=True)
            if not pq:
                t.add_column("unit", no_wrap=True)
            for h in (escape(base), escape(arm), "Δ", "Δ %", f"{conf} CI of Δ") + (("p50", "p99") if pq else ()):
                t.add_column(h, justify="right", overflow="fold")
            t.add_column("verdict", overflow="fold")
            for m in group:
                b, a = m["arms"][base], m["arms"][arm]
                k, ex = m["kind"], m["deterministic"]
                verdict = _verdict(a, m)
                style = {"beyond noise": "bold", "exact change": "bold", "within noise": "dim"}.get(verdict, "dim")
                cells = [escape(m["metric"])] + ([] if pq else [_UNITS[k]])
                cells += [_fmt_value(b["mean"], k, ex), _fmt_value(a["mean"], k, ex), _fmt_change(a["change"], k),
                          _fmt_change(a["change_pct"], k, True), _ci_short(a, k)]
                if pq:
                    cells += [f"{_short(b[q])} → {_short(a[q])}" for q in ("p50", "p99")]
                cells.append(escape(_verdict_text(a, m)))
                t.add_row(*cells, style=style)
            console.print(t)
        console.print("bold: beyond noise (the interval excludes 0) or an exact change · dim: within noise or too "
                      "few captures to judge",
                      style="dim", highlight=False)
    if hidden:
        console.print(f"{hidden} metrics that are exactly 0 in every arm are not shown (--all shows them).")
    for line in method_lines(comp):
        console.print(escape(line), highlight=False, style="dim")
    from ..analyze.findings import compare_lines
    if comp.get("findings"):
        console.print("[bold]Findings[/bold] (resolved, new or still there)", highlight=False)
    for line in compare_lines(comp):
        console.print(f"  {line}", highlight=False, markup=False)
    for n in comp["notes"]:
        console.print(f"note: {escape(n)}", highlight=False)
    for w in comp["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False)


# ---------------------------------------------------------------------------------------------
# command line
