"""compare's figures against analyze's, capture by capture: three captures an arm (a real GPU
capture of main and of the PR, and two windows cut from each), and every metric's per-capture value,
arm mean, change, verdict word and arm facts read back from `analyze --format json` of each capture."""
from __future__ import annotations

import json

import pytest

from clef_prof.capture.slicing import slice_capture
from clicheck import run_main

WINDOWS = ((150_000_000, 650_000_000), (700_000_000, 1_400_000_000))


@pytest.fixture(scope="module")
def arms(capture, tmp_path_factory):
    out = tmp_path_factory.mktemp("arms")
    paths = {}
    for arm, name in (("main", "gpu-q1c16-main"), ("pr", "gpu-q1c16-pr")):
        src = str(capture(name))
        paths[arm] = [src]
        for i, (t0, t1) in enumerate(WINDOWS):
            dst = out / f"{arm}-{i}.sqlite"
            slice_capture(src, str(dst), t0, t1)
            paths[arm].append(str(dst))
    return paths


@pytest.fixture(scope="module")
def both(arms):
    """(compare JSON, {arm: [analyze JSON of each capture]}), run once for the module."""
    def run(argv):
        p = run_main(*argv)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    comp = run(["compare", "--arm", "main=" + ",".join(arms["main"]), "--arm", "pr=" + ",".join(arms["pr"]),
                "--format", "json"])
    each = {arm: [run(["analyze", p, "--format", "json"]) for p in paths] for arm, paths in arms.items()}
    return comp, each


def _lookup(analysis: dict, metric: str):
    """A metric's name is its path in analyze's JSON: per_request.h2d_copies, stages.head.host_ms_per_request."""
    node = analysis
    part, rest = metric.split(".", 1)
    node = node[part]
    if part == "stages":
        stage, key = rest.split(".", 1)
        return node[stage][key]
    return node[rest]


def test_every_metric_per_capture_is_analyzes_figure(both):
    comp, each = both
    names = [m["metric"] for m in comp["metrics"]]
    assert {"per_request.pooler_host_ms", "per_request.h2d_copies", "per_request.d2h_copies",
            "per_request.kernel_launches", "per_request.graph_launches", "per_request.h2d_bytes",
            "stages.head.host_ms_per_request", "stages.transfer.h2d_copies_per_request",
            "overlap.gpu_busy_fraction_of_batch_spans"} <= set(names)
    for m in comp["metrics"]:
        for arm in ("main", "pr"):
            want = [_lookup(a, m["metric"]) for a in each[arm]]
            assert m["arms"][arm]["per_capture"] == pytest.approx(want, rel=1e-12, abs=1e-15), (m["metric"], arm)
            assert m["arms"][arm]["captures"] == 3


def test_host_time_means_are_ratios_of_sums_and_changes_follow(both):
    comp, each = both
    for stage in comp["config"]["stages"]:
        m = next(x for x in comp["metrics"] if x["metric"] == f"stages.{stage}.host_ms_per_request")
        mean = {arm: sum(a["stages"][stage]["host_ms_total"] for a in each[arm]) / sum(a["requests"] for a in each[arm])
                for arm in ("main", "pr")}
        assert m["arms"]["main"]["mean"] == pytest.approx(mean["main"], rel=1e-12)
        assert m["arms"]["pr"]["mean"] == pytest.approx(mean["pr"], rel=1e-12)
        assert m["change"] == pytest.approx(mean["pr"] - mean["main"], rel=1e-9)
        assert m["change_pct"] == pytest.approx(100 * (mean["pr"] / mean["main"] - 1), rel=1e-9)
        # three captures an arm: a verdict, with an interval round the change
        assert not m["verdict"].startswith("too few") and m["ci"] is not None
    pooler = next(x for x in comp["metrics"] if x["metric"] == "per_request.pooler_host_ms")
    want = sum(a["per_request"]["pooler_host_ms"] * a["requests"] for a in each["main"]) / sum(
        a["requests"] for a in each["main"])
    assert pooler["arms"]["main"]["mean"] == pytest.approx(want, rel=1e-12)


def test_counts_that_are_the_same_in_every_capture_are_exact(both):
    comp, each = both
    exact = [m for m in comp["metrics"] if m["deterministic"]]
    assert {m["metric"] for m in exact} >= {"per_request.h2d_copies", "per_request.kernel_launches"}
    for m in exact:
        values = {arm: {_lookup(a, m["metric"]) for a in each[arm]} for arm in ("main", "pr")}
        assert all(len(v) == 1 for v in values.values()), m["metric"]
        change = values["pr"].pop() - values["main"].pop()
        assert m["change"] == change
        assert m["verdict"] == ("exact change" if change != 0 else "exact"), m["metric"]
    h2d = next(m for m in exact if m["metric"] == "per_request.h2d_copies")
    assert (h2d["arms"]["main"]["mean"], h2d["arms"]["pr"]["mean"], h2d["verdict"]) == (9.0, 3.0, "exact change")
    # a count that differs between captures of one arm is not exact, and gets an interval instead
    varying = [m for m in comp["metrics"] if m["metric"] == "per_request.d2h_copies"]
    assert varying and not varying[0]["deterministic"]
    assert len({_lookup(a, "per_request.d2h_copies") for a in each["main"]}) > 1


def test_arm_facts(both, arms):
    comp, each = both
    assert comp["baseline"] == "main"
    for arm in ("main", "pr"):
        facts = comp["arms"][arm]
        assert facts["captures"] == 3 and facts["exports"] == arms[arm]
        assert facts["requests"] == sum(a["requests"] for a in each[arm])
        assert facts["batches"] == sum(a["batches"] for a in each[arm])
        assert facts["nsys_versions"] == sorted({a["capture"]["nsys_version"] for a in each[arm]})


def test_changes_in_percent_and_the_notes(both):
    comp, each = both
    for m in comp["metrics"]:
        base, pr = m["arms"]["main"]["mean"], m["arms"]["pr"]["mean"]
        if base == 0:               # a figure of 0 in the baseline: 0% when it stays 0, else no percentage
            assert m["change_pct"] == (0.0 if pr == 0 else None), m["metric"]
        else:
            assert m["change_pct"] == pytest.approx(100 * (pr / base - 1), rel=1e-9), m["metric"]
        lo_hi = m["arms"]["pr"]["ci_within_pct"]
        if lo_hi is not None and not m["deterministic"]:
            # the within-capture interval of the change in percent holds the change, and no ratio
            # of positive figures is below -100%
            assert -100 <= lo_hi[0] <= m["change_pct"] <= lo_hi[1], m["metric"]
    assert any(m["arms"]["main"]["mean"] == 0 == m["arms"]["pr"]["mean"] for m in comp["metrics"])
    versions = {v for a in comp["arms"].values() for v in a["nsys_versions"]}
    said = [n for n in comp["notes"] if n.startswith("captures from different nsys versions")]
    assert bool(said) is (len(versions) > 1)
    # every stage of the spec has ranges here: no stage is reported missing
    assert not [n for n in comp["notes"] if n.startswith("no range in any capture")]
