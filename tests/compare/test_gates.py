"""The gate verdict (`compare.gates`) on constructed comparisons, against the rule written out by
hand: which end of which interval a gate reads (low end for > and >=, high end for < and <=; %
or the metric's unit), the exact change of an exact count, the within-capture interval below 3
captures, no verdict without either, a zero baseline as ±inf, the boundary itself, and every
line a gate prints, character for character."""
from __future__ import annotations

import math

import pytest

from clef_prof.compare.arm import CompareError
from clef_prof.compare.gates import _fmt_change, _fmt_value, evaluate_gates, gate_line, parse_gate

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
                 "verdict": "beyond noise"}


def test_within_and_too_few_and_exact():
    c = comp("per_request.pooler_host_ms", False,
             arm(0.3, 12.0, within=[0.2, 0.4], within_pct=[8.0, 16.0], verdict="too few captures to judge"),
             arm(0.3, 12.0, verdict="too few servers to judge (2 in an arm; 3 needed)"))
    v1, v2 = evaluate_gates([parse_gate("per_request.pooler_host_ms > 7%", KNOWN)], c)
    assert (v1["arm"], v1["basis"], v1["value"], v1["fired"]) == ("pr1", "within", 8.0, True)
    assert (v2["arm"], v2["basis"], v2["value"], v2["fired"]) == ("pr2", "too few", None, False)
    v1, _ = evaluate_gates([parse_gate("per_request.pooler_host_ms < 0.4", KNOWN)], c)
    assert (v1["value"], v1["fired"]) == (0.4, False)
    ex = comp("per_request.h2d_copies", True, arm(-6.0, -66.66666666666667), arm(0.0, 0.0))
    v1, v2 = evaluate_gates([parse_gate("h2d < -6", KNOWN)], ex)
    assert (v1["basis"], v1["value"], v1["fired"], v2["value"], v2["fired"]) == ("exact", -6.0, False, 0.0, False)
    v1, v2 = evaluate_gates([parse_gate("h2d <= -6", KNOWN)], ex)
    assert (v1["fired"], v2["fired"]) == (True, False)
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
    w = comp(g, False, dict(a, ci=None, ci_pct=None))
    assert gate_line(one(f"{g} >= 8%", w), "host_ms") == (
        f"gate fired: {g} >= 8% — pr1 vs main: change +12.0%, within-capture CI (batch noise of these captures "
        f"only: too few captures to judge run-to-run noise) [+8.0%, +16.0%]: its low end +8.0% >= 8%")
    few = comp(g, False, arm(-0.3, -12.0, verdict="too few servers to judge (2 in an arm; 3 needed)"))
    assert gate_line(one(f"{g} < -5%", few), "host_ms") == (
        f"gate not judged: {g} < -5% — pr1 vs main: too few servers to judge (2 in an arm; 3 needed) "
        f"(point change -12.0%; --gate-on point gates on it)")
    assert gate_line(one(f"{g} < -0.1", comp(g, False, arm(-0.3, -12.0))), "host_ms") == (
        f"gate not judged: {g} < -0.1 — pr1 vs main: too few units (point change -0.3; --gate-on point gates on it)")
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
