"""bench's figures and report (`bench.stats`) on constructed windows, against figures worked out
by hand: each server's ratio of sums, the arm's pooled figure, Welch's interval between servers at
df = 4 (equal spreads of 3 + 3 servers, so the t quantiles have closed forms), the linear scale
when a server completed nothing, the peaks, the error kinds, and the markdown/terminal report
line by line."""
from __future__ import annotations

import math

import pytest

from clef_prof.bench import stats as bs
from clef_prof.bench.load import Case
from clef_prof.bench.run import _result
from clef_prof.compare import welch

Q975_4 = 2 * math.sqrt(math.cos(math.acos(math.sqrt(4 * 0.975 * 0.025)) / 3) / math.sqrt(4 * 0.975 * 0.025) - 1)
# the detectable change's factor at df 4 (checked against a Monte Carlo of its definition in
# tests/compare/test_welch.py): Q975_4 + t_0.8 took the measured spread for the true one
F95_4 = float(welch.detect_factor(4.0, 0.95))


def w(arm: str, server: int, completions: int, elapsed: float, p50: float | None, **kw) -> dict:
    rec = {"arm": arm, "case": 0, "server": server, "completions": completions, "elapsed_s": elapsed,
           "throughput_rps": completions / elapsed, "latency_ms_p50": p50, "latency_ms_p90": p50,
           "latency_ms_p99": p50, "latency_ms_mean": p50, "errors": 0, "error_kinds": {}}
    rec.update(kw)
    return rec


# main: servers at 10, 11, 12.1 req/s (ratio 1.1); pr: 12, 13.2, 14.52 (each 1.2 x main's), so the
# spreads of the logs are equal and Satterthwaite's df is exactly 2 (n - 1) = 4
MAIN = [w("main", 1, 90, 10.0, 20.0, device_memory_peak_mib=900.0, sm_clock_mhz_min=1980, temperature_c_max=61,
          errors=2, error_kinds={"timeout": 2}),
        w("main", 1, 210, 20.0, 22.0, device_memory_peak_mib=1000.5, sm_clock_mhz_min=1410, temperature_c_max=64,
          flags=["throttled"]),
        w("main", 2, 110, 10.0, 20.0, device_memory_peak_mib=950.0, sm_clock_mhz_min=0),
        w("main", 2, 110, 10.0, 22.0, host_rss_peak_mib=300.0),
        w("main", 3, 121, 10.0, 20.0, errors=1, error_kinds={"timeout": 1, "http 500": 3}, flags=["throttled", "a"]),
        w("main", 3, 121, 10.0, 22.0, host_rss_peak_mib=280.0)]
PR = [w("pr", 4, 120, 10.0, 15.0, latency_ms_p90=None, latency_ms_p99=None, latency_ms_mean=None),
      w("pr", 4, 120, 10.0, 17.0, latency_ms_p90=None, latency_ms_p99=None, latency_ms_mean=None),
      w("pr", 5, 132, 10.0, 15.0, latency_ms_p90=None, latency_ms_p99=None, latency_ms_mean=None),
      w("pr", 5, 132, 10.0, 17.0, latency_ms_p90=None, latency_ms_p99=None, latency_ms_mean=None),
      w("pr", 6, 145, 10.0, 15.0, latency_ms_p90=None, latency_ms_p99=None, latency_ms_mean=None),
      w("pr", 6, 218, 15.0, 17.0, latency_ms_p90=None, latency_ms_p99=None, latency_ms_mean=None)]


def test_arm_figures_by_hand():
    a = bs.arm_figures(MAIN)
    assert a["server_rps"] == pytest.approx([300 / 30, 220 / 20, 242 / 20], rel=1e-15)
    assert a["throughput_rps"] == pytest.approx(762 / 70, rel=1e-15)          # Σ completions / Σ s
    assert a["latency_ms_p50"] == pytest.approx(21.0, rel=1e-15)
    assert a["latency_ms_p90"] == a["latency_ms_p99"] == a["latency_ms_mean"] == pytest.approx(21.0, rel=1e-15)
    assert a["device_memory_peak_mib"] == 1000.5 and a["host_rss_peak_mib"] == 300.0
    assert a["server_device_memory_peak_mib"] is None
    assert a["sm_clock_mhz_min"] == 1410 and a["temperature_c_max"] == 64     # a 0 clock (not read) is skipped
    assert a["completions"] == 762 and a["errors"] == {"count": 3, "kinds": {"timeout": 3, "http 500": 3}}
    assert (a["servers"], a["window_count"]) == (3, 6)
    assert a["window_range_rps"] == [9.0, 12.1]
    assert a["server_spread_pct"] == pytest.approx(100 * math.log(1.1), rel=1e-12)
    assert a["flags"] == ["a", "throttled"] and a["windows"] is MAIN
    p = bs.arm_figures(PR)
    assert p["latency_ms_p90"] is None and p["latency_ms_p50"] == pytest.approx(16.0, rel=1e-15)
    assert p["sm_clock_mhz_min"] is None and p["device_memory_peak_mib"] is None and p["flags"] == []
    assert p["window_range_rps"] == [12.0, 218 / 15]


def test_changes_by_hand():
    ch = bs.changes({"main": MAIN, "pr": PR}, "main", 0.95)
    assert [(c["metric"], c["arm"]) for c in ch] == [("throughput_rps", "pr"), ("latency_ms_p50", "pr")]
    t, lat = ch
    base, value = 762 / 70, 867 / 65
    assert (t["baseline_value"], t["value"]) == pytest.approx((base, value), rel=1e-15)
    assert t["change"] == pytest.approx(value - base, rel=1e-13)
    assert t["change_pct"] == pytest.approx(100 * (value - base) / base, rel=1e-13)
    assert (t["unit"], t["baseline"], t["servers"], t["scale"]) == ("req/s", "main", [3, 3], "log")
    assert t["df"] == pytest.approx(4.0, rel=1e-9)
    se = math.log(1.1) * math.sqrt(2 / 3)                    # each arm: var of logs log(1.1)^2, over 3
    lo, hi = math.log(1.2) - Q975_4 * se, math.log(1.2) + Q975_4 * se
    assert t["ci"] == pytest.approx([100 * math.expm1(lo), 100 * math.expm1(hi)], rel=1e-8)
    assert t["ci_abs"] == pytest.approx([base * math.expm1(lo), base * math.expm1(hi)], rel=1e-8)
    assert t["mdc_pct"] == pytest.approx(100 * math.expm1(F95_4 * se), rel=1e-8)
    assert t["mdc_abs"] == pytest.approx(base * math.expm1(F95_4 * se), rel=1e-8)
    assert t["beyond_noise"] is False and t["verdict"] == "within noise"      # lo = -3.3%
    # latency: every server 21 ms in main and 16 ms in pr: no spread, a point interval, df inf -> None
    assert lat["ci"] == pytest.approx([100 * (16 / 21 - 1)] * 2, rel=1e-12) and lat["df"] is None
    assert lat["ci_abs"] == pytest.approx([-5.0, -5.0], rel=1e-12) and lat["mdc_pct"] == 0.0
    assert lat["beyond_noise"] is True and lat["verdict"] == "beyond noise"
    assert bs.verdict_text(lat) == "beyond noise (detects ±0.0%)"
    assert bs.verdict_text(t) == f"within noise (detects ±{100 * math.expm1(F95_4 * se):.1f}%)"


def test_a_server_with_no_completion_gives_no_verdict():
    """A server at 0 req/s has no log figure; the linear scale's interval would be
    [1 - 2.78 * 0.82, ...] req/s on a base of 1 req/s: below -100%. No verdict instead (#35 B7)."""
    main = [w("main", s, c, 10.0, 20.0) for s, c in ((1, 0), (2, 10), (3, 20))]      # 0, 1, 2 req/s
    pr = [w("pr", s, c, 10.0, 20.0) for s, c in ((4, 10), (5, 20), (6, 30))]         # 1, 2, 3 req/s
    ch = bs.changes({"main": main, "pr": pr}, "main", 0.95)
    assert [c["metric"] for c in ch] == ["throughput_rps", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99",
                                         "latency_ms_mean"]
    t, lat = ch[:2]
    assert t["ci"] is None and t["ci_abs"] is None and t["mdc_pct"] is None and t["beyond_noise"] is False
    assert t["verdict"] == "not judged: a server of main has no throughput_rps (it completed no request)"
    assert t["change"] == pytest.approx(1.0, rel=1e-12) and t["change_pct"] == pytest.approx(100.0, rel=1e-12)
    assert lat["change"] == 0.0 and lat["ci"] == [0.0, 0.0] and lat["verdict"] == "within noise"


def test_an_arm_that_completed_nothing_is_zero_not_missing():
    none = [w("main", s, 0, 10.0, None) for s in (1, 2, 3)]
    a = bs.arm_figures(none)
    assert a["throughput_rps"] == 0.0 and a["server_rps"] == [0.0, 0.0, 0.0] and a["latency_ms_p50"] is None
    assert a["server_spread_pct"] is None and a["completions"] == 0


def test_two_servers_measure_a_spread_but_give_no_verdict():
    main, pr = MAIN[:4], PR[:4]                                 # servers 1, 2 and 4, 5
    t = bs.changes({"main": main, "pr": pr}, "main", 0.95)[0]
    assert t["servers"] == [2, 2] and t["ci"] is None and t["ci_abs"] is None and t["beyond_noise"] is False
    assert t["verdict"] == "too few servers to judge (2 in an arm; 3 needed)"
    se = math.log(1.1) * math.sqrt(2 / 2)                        # 2 servers each: var of logs log(1.1)^2 / 2, over 2
    assert t["df"] == pytest.approx(2.0, rel=1e-9) and t["scale"] == "log" and se > 0
    assert t["mdc_pct"] is None and t["mdc_abs"] is None         # no verdict: no power statement
    one = bs.changes({"main": MAIN[:2], "pr": PR}, "main", 0.95)[0]      # 1 server: no spread at all
    assert one["df"] is None and one["mdc_pct"] is None and one["scale"] is None
    assert one["verdict"] == "too few servers to judge (1 in an arm; 3 needed)"
    three_vs_one = bs.changes({"main": PR, "pr": MAIN[:2]}, "main", 0.95)[0]
    assert three_vs_one["verdict"] == "too few servers to judge (1 in an arm; 3 needed)"


def test_gate_view_shape():
    case = {"baseline": "main", "changes": bs.changes({"main": MAIN, "pr": PR}, "main", 0.95)}
    v = bs.gate_view(case)
    assert v["baseline"] == "main" and [m["metric"] for m in v["metrics"]] == ["throughput_rps", "latency_ms_p50"]
    t = v["metrics"][0]
    c = case["changes"][0]
    assert t["deterministic"] is False and set(t["arms"]) == {"main", "pr"}
    assert t["arms"]["main"] == {"mean": c["baseline_value"]} and v["method"] == {"confidence": 0.95}
    assert t["arms"]["pr"] == {"change": c["change"], "change_pct": c["change_pct"], "ci": c["ci_abs"],
                               "ci_pct": c["ci"], "verdict": "within noise", "se": c["se"], "df": c["df"],
                               "scale": "log"}
    assert c["se"] > 0 and c["df"] > 0


def result(arms: dict[str, list[dict]], **kw) -> dict:
    """The report through bench's own assembly (run._result), one closed-loop case."""
    names = list(arms)
    windows = [dict(x, arm=n) for n in names for x in arms[n]]
    servers = [{"arm": n, "server": s} for n in names for s in sorted({x["server"] for x in arms[n]})]
    design = {"rounds": 3, "order": "ABBA", "windows": 2, "window_s": 10.0, "warmup_s": 5.0, "seed": 0,
              "cpus": None, "load_cpus": None, **kw.pop("design", {})}
    return _result(names, {n: f"serve-{n}" for n in names}, [Case(8, 200, 2)], servers, windows, kw.pop("parity", None),
                   [], "ci", 0.95, design, kw.pop("notes", []), 61.4)


def test_markdown_two_arms():
    r = result({"main": MAIN, "pr": PR}, notes=["n1"],
               parity={"reference": "main server 1", "bodies": 4, "tolerance": 0.001,
                       "arms": {"main": {"bodies": 4, "matched": 4, "servers": 3},
                                "pr": {"bodies": 4, "matched": 3, "servers": 1}}})
    se = math.log(1.1) * math.sqrt(2 / 3)
    lo, hi = (100 * math.expm1(math.log(1.2) + s * Q975_4 * se) for s in (-1, 1))
    mdc = 100 * math.expm1(F95_4 * se)
    pct = 100 * (867 / 65 - 762 / 70) / (762 / 70)
    md = bs.render_markdown(r).splitlines()
    assert md[:5] == [
        "### clef-prof bench: main → pr", "",
        "| C | words / questions | req/s main → pr | change | 95% CI | p50 ms | p99 ms | peak device MiB | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
        f"| 8 | 200 / 2 | 10.89 → 13.34 | +{pct:.2f}% | {lo:+.2f}% … +{hi:.2f}% | 21 → 16 | 21 → — "
        f"| 1,000 → — | within noise (detects ±{mdc:.1f}%) |"]
    assert md[5] == ""
    assert md[6:12] == [
        "<sub>C=8 200 words / 2 q: window means main 9–12.1 req/s over 6 windows of 3 servers; "
        "pr 12–14.53 req/s over 6 windows of 3 servers</sub>  ",
        f"<sub>C=8 200 words / 2 q: spread between servers (sd of log req/s): main {100 * math.log(1.1):.1f}%; "
        f"pr {100 * math.log(1.1):.1f}%</sub>  ",
        "<sub>C=8 200 words / 2 q: main: 3 errors of 765 requests (http 500: 3, timeout: 3)</sub>  ",
        "<sub>C=8 200 words / 2 q: main: a</sub>  ",
        "<sub>C=8 200 words / 2 q: main: throttled</sub>  ",
        "<sub>outputs matched (main vs main server 1): 4 of 4 on 3 servers, numbers within 0.001</sub>  "]
    assert md[12] == "<sub>outputs matched (pr vs main server 1): 3 of 4, numbers within 0.001</sub>  "
    assert md[13].startswith("<sub>Method: requests/s = Σ completions / Σ elapsed s (drained requests included)")
    assert md[13].endswith("Servers per arm: main 3, pr 3; 2 × 10 s windows per case and server after 5 s of "
                           "warm-up; order ABBA, case order reversed every other server; took 61 s.</sub>  ")
    nvml = "NVML listed no process of the servers (another PID namespace?): whole-device memory only"
    assert md[14] == ("<sub>Family (pr vs main): 2 figures judged at 95% each: were nothing changed, the chance that "
                      "any says beyond noise is up to 10% (1 - 0.95^2); --family holm holds it to 5%.</sub>  ")
    assert md[15:] == ["<sub>note: n1</sub>  ", f"<sub>note: {nvml}</sub>  "]
    assert bs.header(r) == ["C", "words / questions", "req/s main → pr", "change", "95% CI", "p50 ms", "p99 ms",
                            "peak device MiB", "verdict"]


def test_markdown_three_arms_too_few_servers_and_from():
    pr2 = [dict(x, server=x["server"] + 10) for x in PR[:2]]
    r = result({"main": MAIN, "pr": PR, "pr2": pr2}, design={"windows": 1, "from": "runs/b/bench.json"},
               parity={"reference": "main server 1", "bodies": 2, "tolerance": 0,
                       "arms": {"main": {"bodies": 2, "matched": 1, "servers": 2},
                                "pr": {"bodies": 2, "matched": 2, "servers": 0},
                                "pr2": {"bodies": 2, "matched": 2, "servers": 1}}})
    md = bs.render_markdown(r).splitlines()
    assert md[2] == ("| C | words / questions | arm | req/s main → arm | change | 95% CI | p50 ms | p99 ms | "
                     "peak device MiB | verdict |")
    assert md[3] == "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
    assert [row.split(" | ")[2] for row in md[4:6]] == ["pr", "pr2"]
    pct = 100 * (240 / 20 - 762 / 70) / (762 / 70)
    assert md[5] == (f"| 8 | 200 / 2 | pr2 | 10.89 → 12 | +{pct:.2f}% | — | 21 → 16 | 21 → — | 1,000 → — "
                     "| too few servers to judge (1 in an arm; 3 needed) |")
    foot = [ln for ln in md if ln.startswith("<sub>")]
    assert "<sub>outputs matched (pr2 vs main server 1): 2 of 2, exactly</sub>  " in foot
    assert "<sub>outputs matched (main vs main server 1): 1 of 2 on 2 servers, exactly</sub>  " in foot
    assert not any("(pr vs" in ln for ln in foot if not ln.startswith("<sub>Family"))
    # pr's two judged figures make a family; pr2's (1 server) none is judged: no family line
    assert [ln.split(":")[0] for ln in foot if ln.startswith("<sub>Family")] == ["<sub>Family (pr vs main)"]
    assert "pr2 12–12 req/s over 2 windows of 1 server</sub>" in foot[0]
    assert "main 3, pr 3, pr2 1; 1 × 10 s window per case and server" in " ".join(foot)
    assert foot[-1].startswith("<sub>note: NVML listed no process")
    assert foot[-4] == "<sub>Re-judged from the saved windows of runs/b/bench.json at 95% (no server started).</sub>  "
    assert foot[-2].startswith("<sub>Family (pr vs main): 2 figures judged at 95% each")
    assert foot[-3] == ("<sub>With 1 server in an arm there is no verdict: servers vary from start to start more than "
                        "windows do, and 3 per arm is the least that gives an interval that holds its confidence "
                        "(run more --rounds).</sub>  ")
    assert bs.header(r)[:4] == ["C", "words / questions", "arm", "req/s main → arm"]


def test_renderer_edges():
    assert bs._num(None) == "—" and bs._num(999.94) == "999.9" and bs._num(999.96) == "1000"
    assert bs._num(1000.0) == "1,000"
    assert bs._num(-1234.5) == "-1,234" and bs._num(12.345678) == "12.35" and bs._num(12.345678, 6) == "12.3457"
    assert bs._pct(None) == "—" and bs._pct(float("inf")) == "—" and bs._pct(float("nan")) == "—"
    assert bs._pct(-3.14159) == "-3.14%" and bs._pct(0.0) == "+0.00%"
    assert bs.verdict_text({"verdict": "v", "mdc_pct": None}) == "v"
    assert bs.verdict_text({"verdict": "v", "mdc_pct": float("inf")}) == "v"
    assert bs.verdict_text({"verdict": "v", "mdc_pct": 4.26, "ci": [-1.0, 2.0]}) == "v (detects ±4.3%)"
    assert bs.verdict_text({"verdict": "too few servers to judge", "mdc_pct": 4.26, "ci": None}) == \
        "too few servers to judge"                  # no interval, no power statement
    assert bs.verdict_text({"verdict": "v"}) == "v"


def test_terminal_table_aligns_figures_right():
    """The table (explore.termtable's layout: a rule of ─ under the headers marks each column):
    figures flush right in their columns, labels and the verdict flush left, every cell whole."""
    import re

    from rich.console import Console

    r = result({"main": MAIN, "pr": PR})
    con = Console(record=True, width=400, color_system=None)
    bs.render_terminal(r, con)
    text = con.export_text()
    lines = text.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("─"))
    spans = [m.span() for m in re.finditer("─+", lines[rule])]
    row = next(ln for ln in lines[rule:] if "10.89 → 13.34" in ln)
    assert len(spans) == 9
    cells = [row[a:b] for a, b in spans]
    assert [c.strip() for c in cells[:5]] == ["8", "200 / 2", "10.89 → 13.34", "+22.53%", "-3.32% … +48.94%"]
    for i, c in enumerate(cells):
        right = 2 <= i < 8
        assert c.strip() and (not c.endswith(" ") if right else not c.startswith(" ")), (i, c)
        assert row[spans[i][1]:spans[i][1] + 1] in ("", " ")               # nothing runs into the gap
    assert "Method: requests/s" in text and text.count("clef-prof bench: main → pr") == 1


def test_an_arm_without_windows_and_memory_on_one_side():
    """An arm whose servers gave no window (all died): its row has no figures, no change and no
    verdict, and the footer no window range; device memory read in the arm only: '— → X'; in
    neither: '—'."""
    main = [{k: v for k, v in x.items() if k not in ("device_memory_peak_mib",)} for x in MAIN]
    pr = [dict(x, device_memory_peak_mib=512.0) if i == 0 else x for i, x in enumerate(PR)]
    r = result({"main": main, "pr": pr, "dead": []})
    rows = {row[2]: row for row in bs.rows(r)}
    assert rows["pr"][8] == "— → 512"
    assert rows["dead"][3:] == ["10.89 → —", "—", "—", "21 → —", "21 → —", "—", "—"]
    r2 = result({"main": main, "pr": PR})
    assert bs.rows(r2)[0][7] == "—"
    foot = bs.footer_lines(r)
    assert foot[0] == ("C=8 200 words / 2 q: window means main 9–12.1 req/s over 6 windows of 3 servers; "
                       "pr 12–14.53 req/s over 6 windows of 3 servers")
    assert r["cases"][0]["arms"]["dead"]["servers"] == 0
    assert "With 0 servers in an arm there is no verdict" in " ".join(foot)


def test_terminal_report_on_its_own_console(capsys):
    bs.render_terminal(result({"main": MAIN, "pr": PR}))
    out = capsys.readouterr().out
    assert "clef-prof bench: main → pr" in out and "Method: requests/s" in out and "note: NVML listed" in out
