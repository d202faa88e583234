"""The what-if's renderers on seeded servers: terminal text within 80 columns with its numbers
whole, units with denominators, and the HTML plots' structure (a plot per stage and metric, a
dot per server, the band, the linear range's top, servers past a bend hollow)."""
import json
import re
import xml.etree.ElementTree as ET

import numpy as np

from clef_prof.whatif.render import render
from clef_prof.whatif.slopes import analyse

from whatif_sim import observations, studies

MS = (0.0, 0.03, 0.075, 0.15)


def _bent():
    rng = np.random.default_rng(2)
    x, y, g = studies(rng, 1, (6, 6, 6, 6), MS, -40.0, bend_at=0.08, bend_pct_per_ms=-400.0, sd=0.005, het=0,
                      tails=False, slow=0.0)
    obs = observations(x[0], y[0], g, (0, .1, .25, .5))
    x, y, g = studies(rng, 1, (6, 6, 6, 6), MS, 0.0)
    obs += [o.__class__("parse", *(o.level, o.unit, o.slot + 100, o.added_ms_per_request, o.stage_ms_per_request,
                                   o.calls_per_request, o.windows, o.metrics))
            for o in observations(x[0], y[0], g, (0, .1, .25, .5)) if o.stage]
    return obs


def test_text_fits_80_columns_and_says_everything():
    obs = _bent()
    r = analyse(obs)
    head = next(sl for s in r.stages if s.stage == "head" for sl in s.slopes)
    assert head.linear is False and head.verdict == "critical"
    text = render(r, "text")
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    flat = " ".join(line.strip() for line in lines)
    assert "% per +1 ms/req" in flat and "ms/request" in flat
    assert f"{head.pct_per_ms:+.3g}" in flat and f"[{head.pct_lo:+.3g}, {head.pct_hi:+.3g}]" in flat
    assert "bends past +0.0" in flat and "an extrapolation" in flat
    parse = next(sl for s in r.stages if s.stage == "parse" for sl in s.slopes)
    if parse.hidden:
        assert (f"hidden (indistinguishable from 0; could detect ±{parse.detectable_pct_per_ms:.3g}% "
                "throughput per +1 ms/request)") in flat
    for line in lines:                              # a wrapped line never starts inside a number
        assert not re.match(r"\s*[\d.]+[\]%,]", line), line
    md = render(r, "markdown")
    assert "| metric |" in md and "- head, throughput:" in md


def test_html_plot_structure():
    obs = _bent()
    r = analyse(obs)
    page = render(r, "html", observations=obs)
    assert page.startswith("<!doctype html>") and "<script" not in page and "http://" not in page.replace(
        "http://www.w3.org/2000/svg", "")
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) == 2                           # head and parse, throughput each
    by = {}
    for s in svgs:
        root = ET.fromstring(s)
        by[root.get("data-stage")] = root
    ns = "{http://www.w3.org/2000/svg}"
    head = by["head"]
    circles = head.findall(f"{ns}circle")
    assert len(circles) == 24
    past = [c for c in circles if "past-bend" in c.get("class")]
    assert len(past) == 6 and all(float(c.get("data-x")) > 0.14 for c in past)
    assert len(head.findall(f"{ns}path[@class='band']")) == 1
    assert len(head.findall(f"{ns}line[@class='linear-max']")) == 1
    sl = next(sl for s in r.stages if s.stage == "head" for sl in s.slopes)
    assert head.get("data-verdict") == sl.verdict
    assert len(by["parse"].findall(f"{ns}circle")) == 24


def test_html_page_of_a_saved_gpu_run(tmp_path, capsys):
    """`whatif --from F -f html` on the H100 run of the demo server (transfer and head at +10% and
    +25%, 3 servers a level): a plot per stage and metric, each of its 9 servers (3 baseline, 6
    delayed) a dot at the delay it was given, the verdict the JSON report gives (transfer's p99
    the one critical slope)."""
    from pathlib import Path

    from clef_prof.cli.app import main

    # the run docs/whatif.md cites
    saved = Path(__file__).parents[2] / "docs" / "data" / "gpu-whatif-2026-12-07" / "whatif.json"
    assert main(["whatif", "--from", str(saved), "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "clef-prof/whatif-report/1" and report["baseline_servers"] == 3
    verdicts = {(s["stage"], sl["metric"]): sl["verdict"] for s in report["stages"] for sl in s["slopes"]}
    assert [k for k, v in verdicts.items() if v == "critical"] == [("transfer", "p99_ms")]
    page = tmp_path / "w.html"
    assert main(["whatif", "--from", str(saved), "-f", "html", "-o", str(page)]) == 0
    ns = "{http://www.w3.org/2000/svg}"
    svgs = [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", page.read_text(), re.S)]
    assert {(s.get("data-stage"), s.get("data-metric")): s.get("data-verdict") for s in svgs} == verdicts
    for s in svgs:
        xs = sorted(float(c.get("data-x")) for c in s.findall(f"{ns}circle"))
        assert len(xs) == 9 and xs[:3] == [0.0] * 3 and 0 < xs[3] < xs[-1] < 0.06


def test_the_saved_gpu_run_that_resolves_both_stages(capsys):
    """The H100 run docs/whatif.md cites (transfer and head at 0, +100% and +300% of their own
    time, 3 servers a level): every slope critical; transfer's throughput bends at its last level
    and is fitted on the first two (6 servers), head's is linear over all 9. Each slope holds,
    inside its interval, the least-squares line through the servers' own figures by hand."""
    from pathlib import Path

    import numpy as np

    from clef_prof.cli.app import main

    saved = Path(__file__).parents[2] / "docs" / "data" / "gpu-whatif-2026-12-08b" / "whatif.json"
    assert main(["whatif", "--from", str(saved), "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    slopes = {(s["stage"], sl["metric"]): sl for s in report["stages"] for sl in s["slopes"]}
    assert {v["verdict"] for v in slopes.values()} == {"critical"} and len(slopes) == 6
    assert slopes[("transfer", "throughput_rps")]["bend"] is not None
    assert slopes[("transfer", "throughput_rps")]["servers"] == 6
    assert all(v["bend"] is None and v["servers"] == 9 for k, v in slopes.items() if k != ("transfer", "throughput_rps"))
    obs = json.loads(saved.read_text())["observations"]
    base = [o for o in obs if o["stage"] is None]
    for (stage, metric), sl in slopes.items():
        rows = base + [o for o in obs if o["stage"] == stage]
        rows = [o for o in rows if o["added_ms_per_request"] <= sl["linear_max_ms"] + 1e-12]
        x = np.array([o["added_ms_per_request"] for o in rows])
        y = np.array([o["metrics"][metric] for o in rows])
        by_hand = 100 * np.polyfit(x, y, 1)[0] / np.mean([o["metrics"][metric] for o in base])
        assert sl["pct_lo"] <= by_hand <= sl["pct_hi"], (stage, metric, by_hand, sl["pct_lo"], sl["pct_hi"])
    assert round(slopes[("transfer", "throughput_rps")]["implied"]["change_pct"], 2) == 4.45
    assert round(slopes[("head", "throughput_rps")]["implied"]["change_pct"], 2) == 2.54
