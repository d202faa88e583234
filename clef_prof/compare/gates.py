"""`clef-prof compare`: did the change move the numbers beyond noise?

    clef-prof compare --arm main=a.sqlite,b.sqlite --arm pr='runs/pr-*.sqlite' [--fail-if EXPR ...]
    clef-prof compare AB_DIR

The first arm is the baseline. Every per-request metric of analyze is compared: each arm's
figure, the change (absolute and %), Welch's interval of the change between the arms' captures
(`welch`, a verdict from 3 per arm) and the labelled within-capture interval (`resample`); see
`engine`. Gates (`--fail-if`) turn a change into exit code 1.

This module only parses, gates and renders; it imports NumPy/pandas (through `engine`) when the
command runs, never when the CLI builds its parser.
"""
from __future__ import annotations

import json
import math
import operator
import re
from dataclasses import dataclass

from .arm import CompareError
from ..base.errors import EXIT_NOT_JUDGED
from ..explore.markup import md

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
    servers) per arm there is no such interval, and the gate is not judged (basis "too few"): the
    within-capture interval covers batch noise only, and gating on it fired on 24% of A/A runs at
    1 capture an arm and 5% capture spread (one gate; 54% for any of 4). gate_on="point" uses the
    point change instead (noisier: a host-time gate may then fire on noise).
    """
    by_name = {m["metric"]: m for m in comp["metrics"]}
    confidence = (comp.get("method") or {}).get("confidence", 0.95)
    out = []
    for g in gates:
        entry = by_name.get(g.metric)
        if entry is None:
            why = (_no_cuda_reason(comp) if not _is_host(g.metric)
                   else "its stage has no range in these captures")
            raise CompareError(f"--fail-if {g.text!r}: metric {g.metric} is not available ({why})")
        for arm in list(entry["arms"])[1:]:
            a = entry["arms"][arm]
            point = a["change_pct"] if g.pct else a["change"]
            if point is None:          # % of a zero baseline: +/- infinity
                point = math.copysign(math.inf, a["change"]) if a["change"] else 0.0
            ci = a["ci_pct"] if g.pct else a["ci"]
            if entry["deterministic"]:
                basis, value = "exact", point
            elif gate_on == "point":
                basis, value = "point", point
            elif ci is not None:
                basis, value = "ci", ci[0] if g.op in (">", ">=") else ci[1]
            else:
                basis, value = "too few", None
            fired = value is not None and bool(_OPS[g.op](value, g.value))
            power = _gate_power(g, a, entry["arms"][comp["baseline"]].get("mean"), basis, confidence)
            out.append({**power, "gate": g.text, "metric": g.metric, "arm": arm, "baseline": comp["baseline"],
                        "op": g.op, "fired": fired, "basis": basis,
                        "value": value if value is not None and math.isfinite(value) else None,
                        "threshold": g.value, "pct": g.pct, "change": a["change"], "change_pct": a["change_pct"],
                        "ci": a["ci"], "ci_pct": a["ci_pct"], "ci_within": a.get("ci_within"),
                        "ci_within_pct": a.get("ci_within_pct"), "verdict": a.get("verdict")})
    return out


def _gate_power(g: Gate, a: dict, base, basis: str, confidence: float) -> dict:
    """What the gate could detect: the true change (in the gate's own unit) at which it fires 80% of
    the time ("detects"), and the share of runs with no change in which it fires ("null_fire_pct"),
    both at the measured spread; None where the basis has no spread (exact, too few)."""
    out = {"detects": None, "null_fire_pct": None}
    se, scale = a.get("se"), a.get("scale")
    if basis not in ("ci", "point") or se is None or scale is None or base is None:
        return out
    from . import welch

    sign = 1.0 if g.op in (">", ">=") else -1.0
    log = scale == "log"
    if log:
        rel = g.value / 100.0 if g.pct else (g.value / base if base else None)
        if rel is None or rel <= -1.0:
            return out
        thr = math.log1p(rel)
    else:
        thr = g.value / 100.0 * abs(base) if g.pct else g.value
    df = a.get("df")
    df = math.inf if df is None else df
    conf = confidence if basis == "ci" else None
    d = float(welch.gate_detectable(thr, sign, se, df, conf))
    if log:
        det = 100.0 * math.expm1(d) if g.pct else base * math.expm1(d)
    else:
        det = (100.0 * d / abs(base) if base else None) if g.pct else d
    null = float(welch.gate_null_rate(thr, sign, se, df, conf)) if se > 0 else None
    out = {"detects": det, "null_fire_pct": None if null is None else 100.0 * null}
    ci = a.get("ci_pct") if log else a.get("ci")
    if basis == "ci" and ci is not None and se > 0:
        # the interval's centre on the row's scale (symmetric there), and the one-sided p of the
        # gate's test: the interval's end passes the threshold where p < (1 - confidence) / 2
        diff = 0.5 * (math.log1p(ci[0] / 100.0) + math.log1p(ci[1] / 100.0)) if log else 0.5 * (ci[0] + ci[1])
        out["p_gate"] = float(welch.t_sf(sign * (diff - thr) / se, df))
    return out


POINT_WARNING = ("--gate-on point gates on the point change, not on its interval: a gate on a noisy figure then "
                 "fires on noise (each gate line says on how many runs that changed nothing, at the measured "
                 "spread); the default --gate-on ci fires only beyond noise")


def point_warning(gates, gate_on: str) -> list[str]:
    """The warning --gate-on point earns when a gate is on a noisy figure."""
    return [POINT_WARNING] if gate_on == "point" and any(v["basis"] == "point" for v in gates) else []


def gate_status(v: dict) -> str:
    """fired, passed, or not judged (too few units for an interval)."""
    return "fired" if v["fired"] else "not judged" if v["basis"] == "too few" else "passed"


def gate_exit(verdicts: list[dict]) -> int:
    """The exit status of gates: 1 when one fired, else EXIT_NOT_JUDGED (3) when one could not be
    judged (CI must not read a design too small to judge as a pass), else 0."""
    if any(v["fired"] for v in verdicts):
        return 1
    return EXIT_NOT_JUDGED if any(v["basis"] == "too few" for v in verdicts) else 0


def _no_cuda_reason(comp: dict) -> str:
    """Why the captures have no CUDA figures, in analyze's own words (its warning, less its tail)."""
    from ..analyze.judge.validate import FIGURES_HIDDEN

    for w in comp.get("warnings", []):
        text = w.split("): ", 1)[-1]
        if text.endswith(FIGURES_HIDDEN) and "CUDA" in text:
            return "these captures: " + text[:-len(FIGURES_HIDDEN)].rstrip(": ")
    return "these captures: CUDA was not traced"


def _is_host(metric: str) -> bool:
    return metric.endswith("host_ms_per_request") or metric == "per_request.pooler_host_ms"


def gate_line(v: dict, kind: str) -> str:
    """`gate fired: EXPR — pr vs main: change +134.2%, CI [+123.1%, +146.4%]: low end +123.1% > +5%`"""
    pct = v["pct"]
    point = v["change_pct"] if pct else v["change"]
    if point is None:              # % of a zero baseline: as evaluate_gates reads it
        point = v["value"] if v["value"] is not None else math.copysign(math.inf, v["change"]) if v["change"] else 0.0
    t = v["threshold"]
    thr = f"{v['op']} " + (f"{t:g}%" if pct else _fmt_change(t, kind) if kind == "fraction" else f"{t:g}")
    shown = "inf" if v["value"] is None else _fmt_change(v["value"], kind, pct)
    if v["basis"] == "exact":
        how = f"exact change {_fmt_change(point, kind, pct)}{'' if v['fired'] else ' is not'} {thr}"
    elif v["basis"] == "ci":
        lo, hi = v["ci_pct"] if pct else v["ci"]
        end = "low" if v["op"] in (">", ">=") else "high"
        how = (f"change {_fmt_change(point, kind, pct)}, CI [{_fmt_change(lo, kind, pct)}, "
               f"{_fmt_change(hi, kind, pct)}]: its {end} end {shown}{'' if _OPS[v['op']](v['value'], t) else ' is not'} "
               f"{thr}")
    elif v["basis"] == "too few":
        return (f"gate not judged: {v['gate']} — {v['arm']} vs {v['baseline']}: {v.get('verdict') or 'too few units'}"
                f" (point change {_fmt_change(point, kind, pct)}; not a pass: exit {EXIT_NOT_JUDGED})")
    else:
        how = f"point change {shown}{'' if v['fired'] else ' is not'} {thr}"
    if v.get("family_size"):
        how += (f" (Holm over {v['family_size']} gates: adjusted p {v['p_family']:.3g}, "
                f"{'fires' if v['fired'] else 'does not fire'})")
    if v.get("detects") is not None:
        how += f"; fires 80% of the time at a change of {_fmt_change(v['detects'], kind, pct)}"
        if v["basis"] == "point" and v.get("null_fire_pct") is not None:
            how += f", and on {v['null_fire_pct']:.0f}% of runs that changed nothing"
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
    """The verdict and the change its design finds 80% of the time (none without a verdict)."""
    v = _verdict(a, m).split(" (")[0]          # the counts behind "too few" are in the method lines
    mdc = a.get("mdc_pct")
    if m["deterministic"] or a.get("ci") is None or mdc is None or not math.isfinite(mdc):
        return v
    return f"{v} (detects ±{mdc:.1f}%)"


def _interval(a: dict) -> tuple[list | None, list | None, str]:
    """(ci, ci_pct, label): the interval between captures, else the labelled within-capture one."""
    if a["ci"] is not None:
        return a["ci"], a["ci_pct"], ""
    if a.get("ci_within") is not None:
        return a["ci_within"], a.get("ci_within_pct"), "within-capture "
    return None, None, ""


def _ci_text(a: dict, kind: str, exact: bool) -> str:
    """The interval of a change; "exact" only for deterministic counts, "—" where a design gives none."""
    ci, ci_pct, label = _interval(a)
    if ci is None:
        return "exact" if exact and a.get("change") is not None else "—"
    lo, hi = ci
    txt = f"{label}[{_fmt_change(lo, kind)}, {_fmt_change(hi, kind)}]"
    if ci_pct is not None:
        plo, phi = ci_pct
        txt += f" ({_fmt_change(plo, kind, True)} … {_fmt_change(phi, kind, True)})"
    return txt


def _label_once(cols: list, cells: list[list[str]], changes: list[dict]) -> None:
    """Where every interval of a table is the within-capture one, say so once, in the interval
    column's header, not in each cell: 15 characters a cell made the table too wide for 80
    columns, and termtable stacked it (a row's labels on one line, its figures on the next)."""
    labels = {_interval(a)[2] for a in changes if _interval(a)[0] is not None}
    if labels != {"within-capture "}:
        return
    from dataclasses import replace

    i = next(k for k, c in enumerate(cols) if c.header.endswith("CI of the change"))
    cols[i] = replace(cols[i], header=cols[i].header + " (within-capture)")
    for row in cells:
        row[i] = row[i].removeprefix("within-capture ")


def _ci_short(a: dict, kind: str, exact: bool) -> str:
    """The interval in % of the baseline where it has one, else in the metric's unit; "exact" for
    deterministic counts, "—" for a figure whose design gives no interval (too few captures)."""
    ci, ci_pct, label = _interval(a)
    if ci is None:
        return "exact" if exact else "—"
    if ci_pct is not None:
        lo, hi = ci_pct
        return f"{label}{_fmt_change(lo, kind, True)} to {_fmt_change(hi, kind, True)}"
    lo, hi = ci
    return f"{label}{_fmt_change(lo, kind)} to {_fmt_change(hi, kind)}"


def _function_rows(comp: dict, arm: str) -> list[tuple[str, dict, dict, dict]]:
    """(stage, function entry, its baseline figures, its arm figures) of compare's function-level
    change, in stage order."""
    f = comp.get("functions")
    if not f:
        return []
    base = comp["baseline"]
    return [(stage, e, e["arms"][base], e["arms"][arm]) for stage, st in f["stages"].items() for e in st["functions"]]


def _function_label(e: dict) -> str:
    base = e["file"].rsplit("/", 1)[-1]
    return f"{e['function']} ({base})" if base else e["function"]


FUNCTIONS_NOTE = ("Python functions: self ms per request = the function's self samples (its frame the innermost) x "
                  "ms per sample / requests, one value per capture; the interval and verdict as for the metrics "
                  "above (Welch t between the arms' captures)")


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
             f"finds 80% of the time, the spread being measured (noncentral t: averaged over the spreads a design measures). {who}. Exact: counts that are one multiple of the batch "
             f"size in every batch of every capture, shown without interval. p50/p99: host ms per batch instance."]
    from .family import family_line
    for n, f in (comp.get("family") or {}).items():
        line = family_line(f"{n} vs {comp['baseline']}", f, meth["confidence"])
        if line:
            lines.append(line)
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
            out.append(f"| {md(m['metric'], code=True)} | {vals} | {ch} | {_ci_text(a, k, ex)} | {p50} | {p99} | "
                       f"{md(_verdict_text(a, m))} |")
        out.append("")
        frows = _function_rows(comp, arm)
        if frows:
            out += [f"Python functions per stage, self ms per request ({md(base)} → {md(arm)}):", "",
                    f"| stage | function | {md(base)} → {md(arm)} | change | {conf} CI of the change | verdict |",
                    "|---|---|---:|---:|---:|---|"]
            for stage, e, b, a in frows:
                ch = f"{_fmt_change(a['change'], 'host_ms')} ms ({_fmt_change(a['change_pct'], 'host_ms', True)})"
                if a["beyond_noise"]:
                    ch = f"**{ch}**"
                out.append(f"| {md(stage)} | {md(_function_label(e), code=True)} | {_fmt_value(b['self_ms_per_request'], 'host_ms')} → "
                           f"{_fmt_value(a['self_ms_per_request'], 'host_ms')} ms | {ch} | {_ci_text(a, 'host_ms', False)} | "
                           f"{md(_verdict_text(a, {'deterministic': False}))} |")
            out += ["", f"<sub>{md(FUNCTIONS_NOTE)}</sub>", ""]
    if hidden:
        out += [f"{hidden} metrics that are exactly 0 in every arm are not shown (`--all` shows them).", ""]
    out += [f"<sub>{md(line)}</sub>" for line in method_lines(comp)]
    if comp.get("gates"):
        kinds = {m["metric"]: m["kind"] for m in comp["metrics"]}
        out += ["", f"Gates (exact counts: exact change; others: {_gate_basis(comp)}):", ""]
        for v in comp["gates"]:
            out.append(f"- **{gate_status(v)}**: {md(v['gate'], code=True)} — "
                       + md(gate_line(v, kinds[v["metric"]]).split(" — ", 1)[1]))
    from ..analyze.judge.findings import compare_lines
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


def _label(metric: str, batch: str = "pooler") -> str:
    """The short row label of the terminal table: the stage for host time, else the metric's name
    less `stages.` and `_per_request`, `per_request.` (the work inside batch ranges) as the batch
    range's name, its dots as spaces (`transfer h2d_copies`, `pooler h2d_copies`): not a dotted
    name, so that it is not taken for one `--fail-if` takes (the full names: --wide, --list-metrics)."""
    if metric == "per_request.pooler_host_ms":
        return f"{batch} (batch)"
    if metric.startswith("stages.") and metric.endswith(".host_ms_per_request"):
        return metric[len("stages."):-len(".host_ms_per_request")]
    if metric.startswith("per_request."):
        return f"{batch} {metric[len('per_request.'):].replace('.', ' ')}"
    return metric.removeprefix("stages.").removesuffix("_per_request").replace(".", " ")


def render_terminal(comp: dict, console=None, show_all: bool = False, wide: bool = False,
                    width: int | None = None) -> None:
    """Per arm against the baseline: host time per stage, then CUDA work and overlap, each row its
    two means, the change in % and its interval, the verdict; then findings, method and warnings.
    Every line fits `width` (the terminal's) without cutting a figure; `wide` adds the dotted
    metric names, the absolute change and p50/p99 per batch."""
    from rich.console import Console
    from rich.text import Text

    from ..explore.termtable import Column, table, width as term_width, wrap

    batch = (comp.get("config") or {}).get("batch") or "pooler"      # the batch range's name, for row labels

    width = width or term_width()
    console = console or Console(width=max(width, 20), soft_wrap=True)

    def say(lines, style=None):
        for line in lines:
            console.print(Text(line, style=style or ""), highlight=False, soft_wrap=True)

    names = list(comp["arms"])
    base = comp["baseline"]
    rows, hidden = _shown(comp, show_all)
    conf = f"{100 * comp['method']['confidence']:g}%"
    for n, a in comp["arms"].items():
        caps = f"{a['captures']} capture{'s' if a['captures'] != 1 else ''}"
        say(wrap(f"{n}{' (baseline)' if n == base else ''}: {caps}, {a['batches']:,} batches, {a['requests']:,} "
                 f"requests: {', '.join(a['sources'])}", width, "    "), "bold")
    for arm in names[1:]:
        host = [m for m in rows if m["kind"] == "host_ms"]
        other = [m for m in rows if m["kind"] != "host_ms"]
        for title, group, pq in ((f"{base} → {arm}: host time, ms per request", host, True),
                                 (f"{base} → {arm}: CUDA work per request, GPU overlap", other, False)):
            if not group:
                continue
            cols = [Column("metric" if wide else "stage" if pq else "figure", "left")]
            if not pq:
                cols.append(Column("unit", "left"))
            cols += [Column(base), Column(arm)] + ([Column("change")] if wide else [])
            cols += [Column("change %"), Column(f"{conf} CI of the change"), Column("verdict", "left")]
            per_batch = wide and pq            # the p50/p99 columns: the wide host table only
            if per_batch:
                cols += [Column("p50 ms /batch"), Column("p99 ms /batch")]
            cells = []
            for m in group:
                b, a = m["arms"][base], m["arms"][arm]
                k, ex = m["kind"], m["deterministic"]
                row = [m["metric"] if wide else _label(m["metric"], batch)] + ([] if pq else [_UNITS[k]])
                row += [_fmt_value(b["mean"], k, ex), _fmt_value(a["mean"], k, ex)]
                row += [_fmt_change(a["change"], k)] if wide else []
                row += [_fmt_change(a["change_pct"], k, True), _ci_short(a, k, ex), _verdict_text(a, m)]
                if per_batch:
                    row += [f"{_short(b[q])} → {_short(a[q])}" for q in ("p50", "p99")]
                cells.append(row)
            _label_once(cols, cells, [m["arms"][arm] for m in group])
            say([""])
            say(table(cols, cells, width, labels=1 if pq else 2, title=title))
        frows = _function_rows(comp, arm)
        if frows:
            cols = [Column("stage", "left"), Column("function", "left"), Column(base), Column(arm),
                    Column("change %"), Column(f"{conf} CI of the change"), Column("verdict", "left")]
            cells = [[stage, _function_label(e), _fmt_value(b["self_ms_per_request"], "host_ms"),
                      _fmt_value(a["self_ms_per_request"], "host_ms"), _fmt_change(a["change_pct"], "host_ms", True),
                      _ci_short(a, "host_ms", False), _verdict_text(a, {"deterministic": False})]
                     for stage, e, b, a in frows]
            _label_once(cols, cells, [a for _, _, _, a in frows])
            say([""])
            say(table(cols, cells, width, labels=2,
                      title=f"{base} → {arm}: Python functions per stage, self ms per request (sampled)"))
    say([""])
    say(wrap("beyond noise: the interval excludes 0 · detects ±X%: a change of X is found 80% of the time by this "
             "design (its spread measured, not known) · too few captures to judge: fewer than 3 per arm (the within-capture interval is "
             "labelled) · exact: counts that are one multiple of the batch size, compared without an interval" + ("" if wide else " · gate names: --list-metrics; every column: --wide"),
             width, "  "))
    if hidden:
        say(wrap(f"{hidden} metrics that are exactly 0 in every arm are not shown (--all shows them).", width, "  "))
    from ..analyze.judge.findings import compare_lines
    if comp.get("findings"):
        say([""])
        say(["Findings (resolved, new or still there)"], "bold")
    for line in compare_lines(comp):
        say(wrap(line, width, "    ", "  "))
    say([""])
    for line in method_lines(comp) + ([FUNCTIONS_NOTE] if comp.get("functions") else []):
        say(wrap(line, width, "  "), "dim")
    for n in comp["notes"]:
        say(wrap(f"note: {n}", width, "  "))
    for w in comp["warnings"]:
        say(wrap(f"warning: {w}", width, "  "), "yellow")


# ---------------------------------------------------------------------------------------------
# command line
