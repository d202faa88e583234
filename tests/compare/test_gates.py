"""The gate verdict (`compare.gates`) on constructed comparisons, against the rule written out by
hand: which end of which interval a gate reads (low end for > and >=, high end for < and <=; %
or the metric's unit), the exact change of an exact count, no verdict below 3 captures (the
within-capture interval is never gated on) and its own exit status, a zero baseline as ±inf, the boundary itself, and every
line a gate prints, character for character."""
from __future__ import annotations

import math

import pytest

from clef_prof.compare.arm import CompareError
from clef_prof.compare.gates import (_fmt_change, _fmt_value, evaluate_gates, gate_exit, gate_line, gate_status,
                                    parse_gate)
from clef_prof.base.errors import EXIT_NOT_JUDGED

KNOWN = {"per_request.h2d_copies": "per_request.h2d_copies", "h2d": "per_request.h2d_copies",
         "stages.index.host_ms_per_request": "stages.index.host_ms_per_request",
         "per_request.pooler_host_ms": "per_request.pooler_host_ms", "overlap.frac": "overlap.frac"}


def arm(change, change_pct, ci=None, ci_pct=None, within=None, within_pct=None, verdict=None) -> dict:
    return {"change": change, "change_pct": change_pct, "ci": ci, "ci_pct": ci_pct, "ci_within": within,
            "ci_within_pct": within_pct, "verdict": verdict}


def comp(metric: str, deterministic: bool, *arms: dict, warnings=()) -> dict:
    return {"baseline": "main", "warnings": list(warnings),
            "metrics": [{"metric": metric, "deterministic": deterministic, "kind": "host_ms",
                         "arms": {"main": {}, **{f"pr{i}": a for i, a in enumerate(arms, 1)}}}]}


def one(expr: str, c: dict, gate_on: str = "ci") -> dict:
    (v,) = evaluate_gates([parse_gate(expr, KNOWN)], c, gate_on)
    return v


def test_parse_gate_forms():
    g = parse_gate("  h2d >= +5.5e-1 %  ", KNOWN)
    assert (g.text, g.metric, g.op, g.value, g.pct) == ("h2d >= +5.5e-1 %", "per_request.h2d_copies", ">=", 0.55, True)
    g = parse_gate("per_request.h2d_copies<-.5", KNOWN)
    assert (g.metric, g.op, g.value, g.pct) == ("per_request.h2d_copies", "<", -0.5, False)
    assert [parse_gate(f"h2d {op} 1", KNOWN).op for op in (">", ">=", "<", "<=")] == [">", ">=", "<", "<="]
    for bad in ("h2d = 1", "h2d > ", "> 1", "h2d > 1 %%", "h2d >> 1", "h2d > 1.2.3"):
        with pytest.raises(CompareError, match="expected METRIC OP VALUE or METRIC OP VALUE% with OP one of"):
            parse_gate(bad, KNOWN)
    with pytest.raises(CompareError, match=r"unknown metric 'per_request.h2d_copie' \(did you mean "
                                           r"per_request.h2d_copies\?\)"):
        parse_gate("per_request.h2d_copie > 0", KNOWN)
    with pytest.raises(CompareError) as e:
        parse_gate("zzz > 0", KNOWN)
    assert "unknown metric 'zzz';" in str(e.value) and "did you mean" not in str(e.value)


def test_ci_basis_reads_the_near_end():
    c = comp("stages.index.host_ms_per_request", False,
             arm(0.30, 12.0, ci=[0.10, 0.50], ci_pct=[4.0, 20.0], verdict="beyond noise"))
    # > and >= read the low end, < and <= the high end; % gates the % interval
    assert (one("stages.index.host_ms_per_request > 0.1", c)["fired"],
            one("stages.index.host_ms_per_request >= 0.1", c)["fired"]) == (False, True)
    assert one("stages.index.host_ms_per_request > 0.1", c)["value"] == 0.10
    assert one("stages.index.host_ms_per_request > 3.9%", c)["fired"] is True
    assert one("stages.index.host_ms_per_request > 4%", c)["fired"] is False
    v = one("stages.index.host_ms_per_request < 20%", c)
    assert (v["basis"], v["value"], v["fired"]) == ("ci", 20.0, False)
    assert one("stages.index.host_ms_per_request <= 20%", c)["fired"] is True
    assert one("stages.index.host_ms_per_request < 0.5", c)["fired"] is False
    assert one("stages.index.host_ms_per_request < 0.51", c)["fired"] is True
    # the point change is not what a CI gate reads: 0.30 > 0.2, but the low end 0.10 is not
    assert one("stages.index.host_ms_per_request > 0.2", c)["fired"] is False
    v = one("stages.index.host_ms_per_request > 0.2", c, "point")
    assert (v["basis"], v["value"], v["fired"]) == ("point", 0.30, True)
    assert one("stages.index.host_ms_per_request > 11.9%", c, "point")["fired"] is True


def test_record_carries_the_arm_and_its_figures():
    a = arm(0.30, 12.0, ci=[0.10, 0.50], ci_pct=[4.0, 20.0], within=[0.2, 0.4], within_pct=[8.0, 16.0],
            verdict="beyond noise")
    v = one("stages.index.host_ms_per_request > 5%", comp("stages.index.host_ms_per_request", False, a))
    assert v == {"gate": "stages.index.host_ms_per_request > 5%", "metric": "stages.index.host_ms_per_request",
                 "arm": "pr1", "baseline": "main", "op": ">", "fired": False, "basis": "ci", "value": 4.0,
                 "threshold": 5.0, "pct": True, "change": 0.30, "change_pct": 12.0, "ci": [0.10, 0.50],
                 "ci_pct": [4.0, 20.0], "ci_within": [0.2, 0.4], "ci_within_pct": [8.0, 16.0],
                 "verdict": "beyond noise", "detects": None, "null_fire_pct": None}     # no spread given: no power


def test_too_few_is_not_judged_whatever_the_within_interval_and_exact():
    """Below 3 captures an arm the within-capture interval (batch noise only) never fires a gate,
    even when it lies wholly beyond the threshold: "too few", not judged, exit 3 unless another
    gate fired."""
    c = comp("per_request.pooler_host_ms", False,
             arm(0.3, 12.0, within=[0.2, 0.4], within_pct=[8.0, 16.0], verdict="too few captures to judge"),
             arm(0.3, 12.0, verdict="too few servers to judge (2 in an arm; 3 needed)"))
    v1, v2 = evaluate_gates([parse_gate("per_request.pooler_host_ms > 7%", KNOWN)], c)
    assert (v1["arm"], v1["basis"], v1["value"], v1["fired"]) == ("pr1", "too few", None, False)
    assert (v2["arm"], v2["basis"], v2["value"], v2["fired"]) == ("pr2", "too few", None, False)
    assert [gate_status(v) for v in (v1, v2)] == ["not judged", "not judged"]
    assert gate_exit([v1, v2]) == EXIT_NOT_JUDGED == 3
    v1, _ = evaluate_gates([parse_gate("per_request.pooler_host_ms < 0.4", KNOWN)], c)
    assert (v1["value"], v1["fired"]) == (None, False)
    ex = comp("per_request.h2d_copies", True, arm(-6.0, -66.66666666666667), arm(0.0, 0.0))
    v1, v2 = evaluate_gates([parse_gate("h2d < -6", KNOWN)], ex)
    assert (v1["basis"], v1["value"], v1["fired"], v2["value"], v2["fired"]) == ("exact", -6.0, False, 0.0, False)
    assert gate_exit([v1, v2]) == 0 and [gate_status(v) for v in (v1, v2)] == ["passed", "passed"]
    v1, v2 = evaluate_gates([parse_gate("h2d <= -6", KNOWN)], ex)
    assert (v1["fired"], v2["fired"]) == (True, False)
    # a fired gate wins over one not judged: exit 1
    few = evaluate_gates([parse_gate("per_request.pooler_host_ms > 7%", KNOWN)], c)
    assert gate_exit(few + [v1]) == 1 and gate_exit(few + [v2]) == EXIT_NOT_JUDGED
    v1, _ = evaluate_gates([parse_gate("h2d < -50%", KNOWN)], ex)
    assert (v1["value"], v1["fired"]) == (pytest.approx(-66.66666666666667), True)


def test_zero_baseline_percent_is_infinite():
    ex = comp("per_request.h2d_copies", True, arm(3.0, None), arm(-2.0, None), arm(0.0, None))
    vs = evaluate_gates([parse_gate("h2d > 1000%", KNOWN)], ex)
    assert [(v["fired"], v["value"]) for v in vs] == [(True, None), (False, None), (False, 0.0)]
    vs = evaluate_gates([parse_gate("h2d < -1000%", KNOWN)], ex)
    assert [v["fired"] for v in vs] == [False, True, False]
    assert gate_line(vs[1], "count") == "gate fired: h2d < -1000% — pr2 vs main: exact change -inf < -1000%"


def test_unavailable_metric_says_why():
    c = comp("per_request.h2d_copies", True, arm(0.0, 0.0),
             warnings=["a.sqlite (x): CUDA was not traced: CUDA figures are hidden"])
    with pytest.raises(CompareError, match=r"metric stages.index.host_ms_per_request is not available "
                                           r"\(its stage has no range in these captures\)"):
        evaluate_gates([parse_gate("stages.index.host_ms_per_request > 1", KNOWN)], c)
    with pytest.raises(CompareError, match=r"metric per_request.pooler_host_ms is not available \(its stage"):
        evaluate_gates([parse_gate("per_request.pooler_host_ms > 1", KNOWN)], c)
    with pytest.raises(CompareError, match=r"metric overlap.frac is not available \(these captures: "):
        evaluate_gates([parse_gate("overlap.frac > 1", KNOWN)], c)


def test_gate_lines():
    a = arm(0.30, 12.0, ci=[0.10, 0.50], ci_pct=[4.0, 20.0], within=[0.2, 0.4], within_pct=[8.0, 16.0])
    c = comp("stages.index.host_ms_per_request", False, a)
    g = "stages.index.host_ms_per_request"
    assert gate_line(one(f"{g} > 5%", c), "host_ms") == (
        f"gate passed: {g} > 5% — pr1 vs main: change +12.0%, CI [+4.0%, +20.0%]: its low end +4.0% is not > 5%")
    assert gate_line(one(f"{g} <= 0.5", c), "host_ms") == (
        f"gate fired: {g} <= 0.5 — pr1 vs main: change +0.3, CI [+0.1, +0.5]: its high end +0.5 <= 0.5")
    assert gate_line(one(f"{g} > 0.25", c, "point"), "host_ms") == (
        f"gate fired: {g} > 0.25 — pr1 vs main: point change +0.3 > 0.25")
    w = comp(g, False, dict(a, ci=None, ci_pct=None, verdict="too few captures to judge (1 in an arm; 3 needed)"))
    assert gate_line(one(f"{g} >= 8%", w), "host_ms") == (
        f"gate not judged: {g} >= 8% — pr1 vs main: too few captures to judge (1 in an arm; 3 needed) "
        f"(point change +12.0%; not a pass: exit 3)")
    few = comp(g, False, arm(-0.3, -12.0, verdict="too few servers to judge (2 in an arm; 3 needed)"))
    assert gate_line(one(f"{g} < -5%", few), "host_ms") == (
        f"gate not judged: {g} < -5% — pr1 vs main: too few servers to judge (2 in an arm; 3 needed) "
        f"(point change -12.0%; not a pass: exit 3)")
    assert gate_line(one(f"{g} < -0.1", comp(g, False, arm(-0.3, -12.0))), "host_ms") == (
        f"gate not judged: {g} < -0.1 — pr1 vs main: too few units (point change -0.3; not a pass: exit 3)")
    ex = comp("per_request.h2d_copies", True, arm(-6.0, -66.7))
    assert gate_line(one("h2d < -3", ex), "count") == "gate fired: h2d < -3 — pr1 vs main: exact change -6 < -3"
    assert gate_line(one("h2d > 0", ex), "count") == "gate passed: h2d > 0 — pr1 vs main: exact change -6 is not > 0"
    fr = comp("overlap.frac", False, arm(0.05, 10.0, ci=[0.01, 0.09], ci_pct=[2.0, 18.0]))
    assert gate_line(one("overlap.frac > 0.02", fr), "fraction") == (
        "gate passed: overlap.frac > 0.02 — pr1 vs main: change +5.00 pp, CI [+1.00 pp, +9.00 pp]: "
        "its low end +1.00 pp is not > +2.00 pp")


def test_number_formats():
    assert _fmt_value(None, "count") == "—" and _fmt_value(0.1234, "fraction") == "12.34%"
    assert _fmt_value(3424.0, "bytes", True) == "3,424" and _fmt_value(12.25, "bytes", True) == "12.25"
    assert _fmt_value(3424.0, "bytes") == "3,424.0" and _fmt_value(9.0, "count") == "9.000"
    assert _fmt_value(9.0, "count", True) == "9"
    assert _fmt_value(12345.6, "host_ms") == "12,346" and _fmt_value(9999.4, "host_ms") == "9999"
    assert _fmt_value(1.23456, "host_ms") == "1.235" and _fmt_value(0.0, "host_ms") == "0"
    assert _fmt_value(1.234e-5, "host_ms") == "1.23e-05" and _fmt_value(1e-4, "host_ms") == "0.0001"
    assert _fmt_value(-2.5e-6, "gpu_ms") == "-2.50e-06"
    assert _fmt_change(None, "count") == "—" and _fmt_change(math.inf, "count") == "+inf"
    assert _fmt_change(-math.inf, "count", True) == "-inf"
    assert _fmt_change(5.56, "host_ms", True) == "+5.6%" and _fmt_change(-0.04, "host_ms", True) == "-0.0%"
    assert _fmt_change(0.0123, "fraction") == "+1.23 pp" and _fmt_change(-0.5, "fraction") == "-50.00 pp"
    assert _fmt_change(3.0, "count") == "+3" and _fmt_change(3.5, "count") == "+3.500"
    assert _fmt_change(-2048.0, "bytes") == "-2,048" and _fmt_change(-2.5, "bytes") == "-2.5"
    assert _fmt_change(-2.5, "host_ms") == "-2.5" and _fmt_change(0.0, "host_ms") == "+0"


# ---------------------------------------------------------------------------------------------
# the report of a constructed comparison


def report_comp(gate_on: str = "ci", arm_name: str = "pr", captures: int = 1) -> dict:
    """3 captures of main against 1 of pr: an index stage judged between captures (beyond noise), the
    pooler with only its within-capture interval, an exact count that changed, one that is 0 in
    both arms (hidden), and a GPU fraction whose interval has no % and whose mdc is infinite."""
    def m(metric, kind, det, base, arm):
        return {"metric": metric, "kind": kind, "deterministic": det, "arms": {"main": base, arm_name: arm}}

    metrics = [
        m("stages.index.host_ms_per_request", "host_ms", False, {"mean": 0.5, "p50": 1.2, "p99": 3.4},
          {"mean": 0.6, "p50": 1.4, "p99": 3.9, "change": 0.1, "change_pct": 20.0, "ci": [0.05, 0.15],
           "ci_pct": [10.0, 30.0], "verdict": "beyond noise", "mdc_pct": 7.25}),
        m("per_request.pooler_host_ms", "host_ms", False, {"mean": 2.0, "p50": 8.0, "p99": 9.0},
          {"mean": 1.9, "p50": 7.5, "p99": 8.8, "change": -0.1, "change_pct": -5.0, "ci": None, "ci_pct": None,
           "ci_within": [-0.2, 0.0], "ci_within_pct": [-10.0, 0.0],
           "verdict": "too few captures to judge (1 in an arm; 3 needed)", "mdc_pct": None}),
        m("per_request.h2d_copies", "count", True, {"mean": 9.0},
          {"mean": 3.0, "change": -6.0, "change_pct": -66.66666666666667, "ci": None, "ci_pct": None,
           "verdict": "exact", "mdc_pct": 3.0}),
        m("stages.index.memset_calls_per_request", "count", True, {"mean": 0.0},
          {"mean": 0.0, "change": 0.0, "change_pct": None, "ci": None, "ci_pct": None, "verdict": "exact"}),
        m("overlap.gpu_busy_fraction", "fraction", False, {"mean": 0.25},
          {"mean": 0.3, "change": 0.05, "change_pct": 20.0, "ci": [0.01, 0.09], "ci_pct": None,
           "verdict": "within noise", "mdc_pct": math.inf}),
        m("overlap.kernel_gpu_ms_per_request", "gpu_ms", False, {"mean": 0.0},      # 0 in both, not exact: shown
          {"mean": 0.0, "change": 0.0, "change_pct": None, "ci": [0.0, 0.0], "ci_pct": None, "verdict": "within noise",
           "mdc_pct": None}),
    ]
    c = {"baseline": "main", "metrics": metrics, "notes": ["n1"], "warnings": ["w1"],
         "arms": {"main": {"captures": 3, "batches": 1200, "requests": 4800, "sources": ["a.sqlite", "b.sqlite"]},
                  arm_name: {"captures": captures, "batches": 400, "requests": 1600, "sources": ["p.sqlite"]}},
         "findings": [{"title": "pageable H2D copies", "stage": "transfer", "id": "h2d-pageable", "unit": "per request",
                       "arms": {"main": {"captures": 3, "fired_in": 3, "value": 9.0},
                                arm_name: {"captures": captures, "fired_in": 0, "value": 0.0}},
                       "status": {arm_name: "resolved"}}],
         "method": {"confidence": 0.9, "B": 2000, "seed": 7, "min_captures": 3, "gate_on": gate_on}}
    known = {x["metric"]: x["metric"] for x in metrics}
    c["gates"] = evaluate_gates([parse_gate("stages.index.host_ms_per_request > 5%", known),
                                 parse_gate("per_request.h2d_copies < 0", known)], c, gate_on)
    return c


def test_markdown_report_by_hand():
    from clef_prof.compare.gates import render_markdown

    md = render_markdown(report_comp()).splitlines()
    assert md[:10] == [
        "### clef-prof compare: main → pr", "",
        "| metric | main → pr | change | 90% CI of the change | p50 ms /batch | p99 ms /batch | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
        "| `stages.index.host_ms_per_request` | 0.5 → 0.6 ms | **+0.1 ms (+20.0%)** | [+0.05, +0.15] (+10.0% … +30.0%) "
        "| 1.2 → 1.4 | 3.4 → 3.9 | beyond noise (detects ±7.2%) |",
        "| `per_request.pooler_host_ms` | 2 → 1.9 ms | -0.1 ms (-5.0%) | within-capture [-0.2, +0] (-10.0% … +0.0%) "
        "| 8 → 7.5 | 9 → 8.8 | too few captures to judge |",
        "| `per_request.h2d_copies` | 9 → 3 | **-6 (-66.7%)** | exact |  |  | exact change |",
        "| `overlap.gpu_busy_fraction` | 25.00% → 30.00% | +5.00 pp (+20.0%) | [+1.00 pp, +9.00 pp] |  |  | "
        "within noise |",
        "| `overlap.kernel_gpu_ms_per_request` | 0 → 0 ms | +0 ms (—) | [+0, +0] |  |  | within noise |", ""]
    assert md[10:12] == ["1 metrics that are exactly 0 in every arm are not shown (`--all` shows them).", ""]
    assert md[12].startswith("<sub>Method: a capture is the unit that varies from run to run: 90% Welch t interval")
    assert "main: 3 captures, 1,200 batch instances, 4,800 requests; pr: 1 capture, 400 batch instances, 1,600 " \
           "requests." in md[12]
    assert md[13].startswith("<sub>With 1 capture in an arm there is no verdict (too few captures to judge; 3 per "
                             "arm needed)") and "(batch instances resampled within each capture, B = 2000, seed 7)" \
        in md[13]
    assert md[14:] == [
        "", "Gates (exact counts: exact change; others: fire only when the whole interval is beyond the threshold):",
        "", "- **fired**: `stages.index.host_ms_per_request > 5%` — pr vs main: change +20.0%, CI [+10.0%, +30.0%]: "
        "its low end +10.0% &gt; 5%".replace("CI [+10.0%, +30.0%]", r"CI \[+10.0%, +30.0%\]"),
        "- **fired**: `per_request.h2d_copies < 0` — pr vs main: exact change -6 &lt; 0",   # markdown-escaped
        "", "Findings (per finding: resolved, new or still there):", "",
        "- pageable H2D copies in transfer (\\`h2d-pageable\\`): resolved (9 → 0 per request; fired in 3/3 → 0/1 "
        "captures)",
        "", "> note: n1", "", "> **warning:** w1"]
    three = render_markdown(report_comp(captures=3))
    assert "<sub>Method: a capture" in three and "there is no verdict" not in three
    odd = render_markdown(report_comp(arm_name="pr — b")).splitlines()
    assert "- **fired**: `per_request.h2d_copies < 0` — pr — b vs main: exact change -6 &lt; 0" in odd
    shown = render_markdown(report_comp(), show_all=True)
    assert "| `stages.index.memset_calls_per_request` | 0 → 0 | +0 (—) | exact |" in shown
    assert "metrics that are exactly 0" not in shown
    assert "Gates (exact counts: exact change; others: the point change):" in render_markdown(report_comp("point"))


def test_terminal_report_by_hand():
    import re

    from rich.console import Console

    from clef_prof.compare.gates import render_terminal

    def lines(**kw):
        con = Console(record=True, width=300, color_system=None)
        render_terminal(report_comp(), con, width=300, **kw)
        return con.export_text().splitlines()

    def row(out, *cells):
        rx = re.compile(r"^\s*" + r"\s{2,}".join(re.escape(c) for c in cells) + r"\s*$")
        return [ln for ln in out if rx.match(ln)]

    out = lines()
    assert out[:2] == ["main (baseline): 3 captures, 1,200 batches, 4,800 requests: a.sqlite, b.sqlite",
                       "pr: 1 capture, 400 batches, 1,600 requests: p.sqlite"]
    assert "main → pr: host time, ms per request" in out and "main → pr: CUDA work per request, GPU overlap" in out
    assert row(out, "stage", "main", "pr", "%", "90% CI of the change", "verdict")       # "change" above "%"
    assert row(out, "index", "0.5", "0.6", "+20.0%", "+10.0% to +30.0%", "beyond noise (detects ±7.2%)")
    assert row(out, "pooler (batch)", "2", "1.9", "-5.0%", "within-capture -10.0% to +0.0%", "too few captures to judge")
    assert row(out, "figure", "unit", "main", "pr", "%", "90% CI of the change", "verdict")
    assert row(out, "pooler h2d_copies", "/req", "9", "3", "-66.7%", "exact", "exact change")     # no dotted name
    assert row(out, "overlap gpu_busy_fraction", "% of span", "25.00%", "30.00%", "+20.0%", "+1.00 pp to +9.00 pp",
               "within noise")
    assert not any("memset" in ln for ln in out)
    assert "1 metrics that are exactly 0 in every arm are not shown (--all shows them)." in out
    assert any(ln.startswith("Method: a capture is the unit") for ln in out)
    assert out[-2:] == ["note: n1", "warning: w1"]
    assert row(out, "overlap kernel_gpu_ms", "ms/req", "0", "0", "—", "+0 to +0", "within noise")
    assert "Findings (resolved, new or still there)" in out
    assert "  pageable H2D copies in transfer (`h2d-pageable`): resolved (9 → 0 per request; fired in 3/3 → 0/1 " \
           "captures)" in out
    assert any("names: --list-metrics; every column: --wide" in ln for ln in out)
    wide = lines(wide=True, show_all=True)
    assert row(wide, "metric", "main", "pr", "change", "%", "90% CI of the change", "verdict", "/batch", "/batch")
    assert row(wide, "stages.index.host_ms_per_request", "0.5", "0.6", "+0.1", "+20.0%", "+10.0% to +30.0%",
               "beyond noise (detects ±7.2%)", "1.2 → 1.4", "3.4 → 3.9")
    assert row(wide, "stages.index.memset_calls_per_request", "/req", "0", "0", "+0", "—", "exact", "exact")
    assert not any("every column: --wide" in ln for ln in wide)
    assert not any("metrics that are exactly 0" in ln for ln in wide)


def test_terminal_styles_and_json():
    from rich.console import Console

    from clef_prof.compare.gates import render_json, render_terminal

    con = Console(record=True, width=300, color_system="standard", force_terminal=True)
    render_terminal(report_comp(), con, width=300)
    styled = con.export_text(styles=True)
    assert "\x1b[1mmain (baseline): 3 captures" in styled and "\x1b[33mwarning: w1" in styled
    assert "\x1b[2mMethod: a capture" in styled and "\x1b[1mFindings (resolved" in styled
    c = report_comp()
    text = render_json(c)
    assert text.endswith("}\n") and text.splitlines()[1] == '  "baseline": "main",'
    assert __import__("json").loads(text)["gates"][0]["value"] == 10.0


def test_unavailable_cuda_metric_quotes_analyze():
    hidden = "H2D, kernel and overlap figures are not shown"
    c = comp("per_request.h2d_copies", True, arm(0.0, 0.0),
             warnings=["x.sqlite (ab): other warning about CUDA",
                       f"a.sqlite (3 ranks): CUDA was traced without kernels: {hidden}"])
    with pytest.raises(CompareError, match=r"\(these captures: CUDA was traced without kernels\)$"):
        evaluate_gates([parse_gate("overlap.frac > 1", KNOWN)], c)
    c = comp("per_request.h2d_copies", True, arm(0.0, 0.0), warnings=["x.sqlite (ab): other warning about CUDA"])
    with pytest.raises(CompareError, match=r"\(these captures: CUDA was not traced\)$"):
        evaluate_gates([parse_gate("overlap.frac > 1", KNOWN)], c)


def test_too_few_on_a_zero_baseline_without_change():
    """A % gate on a count that is 0 in both arms and has no verdict: its point change is 0, not -inf
    (bug before: gate_line read a zero change as negative)."""
    c = comp("per_request.pooler_host_ms", False, arm(0.0, None, verdict="too few servers to judge"))
    v = one("per_request.pooler_host_ms > 5%", c)
    assert (v["basis"], v["fired"], v["value"]) == ("too few", False, None)
    assert gate_line(v, "host_ms").endswith("too few servers to judge (point change +0.0%; not a pass: exit 3)")
    c = comp("per_request.pooler_host_ms", False, arm(-1.0, None, verdict="too few servers to judge"))
    assert "(point change -inf;" in gate_line(one("per_request.pooler_host_ms > 5%", c), "host_ms")


def test_terminal_report_on_its_own_console(capsys):
    from clef_prof.compare.gates import render_terminal

    render_terminal(report_comp(), width=300)
    out = capsys.readouterr().out
    assert out.startswith("main (baseline): 3 captures, 1,200 batches, 4,800 requests: a.sqlite, b.sqlite\n")
    assert "warning: w1" in out


def test_narrow_terminal_stacks_labels_then_figures():
    """At 70 columns the CUDA table stacks: each row's figure name and unit (its two labels) on a
    line, its figures under one header on the next; a comparison with host metrics only has no
    CUDA table at all."""
    from rich.console import Console

    from clef_prof.compare.gates import render_terminal

    con = Console(record=True, width=70, color_system=None)
    render_terminal(report_comp(), con, width=70)
    out = [ln.rstrip() for ln in con.export_text().splitlines()]
    i = out.index("pooler h2d_copies  /req")
    assert out[i + 1].split() == ["9", "3", "-66.7%", "exact", "exact", "change"]
    assert out.index("figure · unit") < i
    host = report_comp()
    host["metrics"] = [m for m in host["metrics"] if m["kind"] == "host_ms"]
    con = Console(record=True, width=300, color_system=None)
    render_terminal(host, con, width=300)
    text = con.export_text()
    assert "main → pr: host time, ms per request" in text and "CUDA work" not in text


def test_short_labels_name_the_batch_range_and_are_no_metric_names():
    """The terminal's short row labels: the batch range by its own name (`--batch forward`), and
    never a dotted name, which --fail-if would take for a metric and refuse."""
    from clef_prof.compare.gates import _label

    assert _label("per_request.pooler_host_ms", "forward") == "forward (batch)"
    assert _label("per_request.h2d_copies", "forward") == "forward h2d_copies"
    assert _label("per_request.h2d_copies", "model.forward") == "model.forward h2d_copies"     # the name as given
    assert _label("stages.transfer.h2d_copies_per_request") == "transfer h2d_copies"
    assert _label("stages.head.host_ms_per_request") == "head"
    assert _label("overlap.gpu_busy_fraction_of_batch_spans") == "overlap gpu_busy_fraction_of_batch_spans"


def test_gate_power_by_hand():
    """A gate's detectable change: threshold + c x se on the row's scale (c: `detect_factor`, one-
    sided, checked by Monte Carlo in test_welch and by simulation in tests/bench/test_gate_power.py),
    back in the gate's unit; and its no-change fire rate, P(T > threshold / se + q)."""
    from clef_prof.compare import welch

    a = dict(arm(0.30, 12.0, ci=[0.10, 0.50], ci_pct=[4.0, 20.0], verdict="beyond noise"), se=0.05, df=4.0,
             scale="log")
    c = comp("stages.index.host_ms_per_request", False, a)
    c["metrics"][0]["arms"]["main"] = {"mean": 2.5}
    c1 = float(welch.detect_factor(4.0, 0.95, two_sided=False))
    v = one("stages.index.host_ms_per_request > 5%", c)
    assert v["detects"] == pytest.approx(100 * math.expm1(math.log(1.05) + c1 * 0.05), rel=1e-12)
    assert 5 + 100 * 2.776 * 0.05 < v["detects"]        # beyond the threshold by more than q se
    v = one("stages.index.host_ms_per_request < -0.1", c)                      # absolute: base 2.5
    assert v["detects"] == pytest.approx(2.5 * math.expm1(math.log1p(-0.1 / 2.5) - c1 * 0.05), rel=1e-12)
    v = one("stages.index.host_ms_per_request > 5%", c, "point")
    cp = float(welch.detect_factor(4.0, None, two_sided=False))
    assert v["detects"] == pytest.approx(100 * math.expm1(math.log(1.05) + cp * 0.05), rel=1e-12)
    # P(T_4 > ln 1.05 / 0.05 = 0.9758): Student t's survival function at 4 df, closed form
    t = math.log(1.05) / 0.05
    sf = 0.5 - (t / math.sqrt(4 + t * t)) * (1 + 2 / (4 + t * t)) / 2 * 1.0
    sf = 0.5 * (1 - t * (6 + t * t) / (4 + t * t) ** 1.5)
    assert v["null_fire_pct"] == pytest.approx(100 * sf, rel=1e-6)
    line = gate_line(v, "host_ms")
    assert line.endswith(f"; fires 80% of the time at a change of {v['detects']:+.1f}%, and on "
                         f"{v['null_fire_pct']:.0f}% of runs that changed nothing")
