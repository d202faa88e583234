"""Findings on the real captures: each rule fires where its evidence is, and stays quiet where it is not."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clef_prof.analyze.judge import findings as fd
from clef_prof.analyze.model import Finding, LostRecords
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.config import StageConfig
from clef_prof.base.errors import SpecError
from clef_prof.annotate.spec import from_dict
from clicheck import run_main
from conftest import sql

ROOT = Path(__file__).resolve().parents[2]
CUDA_RULES = {"pageable-h2d", "small-h2d-copies", "sync-in-stage", "no-cuda-graph", "host-bound",
              "cuda-outside-stages", "lost-records"}
SPEC = {"batch": {}, "stages": {s: f"m:{s}" for s in ("parse", "index", "transfer", "head", "encode")}}


@pytest.fixture(scope="module")
def results(capture):
    names = ("gpu-q1c16-main", "gpu-q1c16-pr", "gpu25-q1c16-pr", "cpu23-inline")
    return {n: analyze(str(capture(n))).result for n in names}


def fired(result) -> dict[tuple[str, str], Finding]:
    return {(f.id, f.stage): f for f in result.findings}



def in_stage(api: str, stage: str) -> str:
    """API calls named `api`* whose start lies in a `stage` range on the same thread."""
    return ("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId "
            "JOIN NVTX_EVENTS e ON e.globalTid = r.globalTid AND r.start >= e.start AND r.start < e.[end] "
            f"JOIN StringIds s ON s.id = e.textId WHERE s.value = '{stage}' AND n.value LIKE '{api}%'")


REQUESTS_SQL = "SELECT SUM(CAST(substr(text, 10) AS INT)) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'"


def test_main_pageable_pack_and_sync_in_transfer(results, capture, truth):
    r = results["gpu-q1c16-main"]
    f = fired(r)
    path = capture("gpu-q1c16-main")
    req = sql(path, REQUESTS_SQL)[0][0]
    assert req == truth("gpu-q1c16-main")["ground_truth"]["requests"] == 1520

    page = f[("pageable-h2d", "transfer")]
    assert page.severity == "high"
    assert page.evidence["pageable_copies"] == page.evidence["h2d_copies"] == 13680
    assert page.evidence["pageable_copies_per_request"] == 9.0
    assert page.evidence["pageable_pct_of_h2d_copies"] == 100.0
    assert page.advice and page.expected and page.summary.startswith("9.00 pageable H2D copies per request")

    pack = f[("small-h2d-copies", "transfer")].evidence
    assert pack["h2d_copies_per_request"] == 9.0 and pack["bytes_per_copy"] == 5_204_480 / 13680
    assert pack["copies_per_request_if_packed"] == pytest.approx(282 / 1520)      # one copy per batch

    # one cudaStreamSynchronize per H2D copy (traces README): 9 per request in transfer, counted in SQL
    syncs = sql(path, in_stage("cudaStreamSynchronize", "transfer"))[0][0]
    assert syncs == 13680
    ev = f[("sync-in-stage", "transfer")].evidence
    assert ev["syncs"] == syncs and ev["stream_or_event_syncs"] == syncs and ev["device_syncs"] == 0
    assert ev["syncs_per_request"] == syncs / req == 9.0
    # head's one .cpu() readback per batch is within the tolerated one sync per batch
    assert sql(path, in_stage("cudaStreamSynchronize", "head"))[0][0] == 282
    assert ("sync-in-stage", "head") not in f and r.stages["head"].cuda.sync_calls == 282


def test_pr_has_no_pageable_or_sync_finding(results):
    for name in ("gpu-q1c16-pr", "gpu25-q1c16-pr"):
        f = fired(results[name])
        assert not [k for k in f if k[0] in ("pageable-h2d", "sync-in-stage")], name
        # 3 pinned copies per request of 1141 B: still several small copies
        assert f[("small-h2d-copies", "transfer")].evidence["h2d_copies_per_request"] == 3.0


def test_stage_share_equals_sql(results, capture):
    r = results["gpu-q1c16-main"]
    q = ("SELECT AVG(100.0 * (t.[end] - t.start) / (p.[end] - p.start)) FROM NVTX_EVENTS p JOIN NVTX_EVENTS t "
         "ON t.globalTid = p.globalTid AND t.start >= p.start AND t.[end] <= p.[end] JOIN StringIds s ON s.id = t.textId "
         "WHERE s.value = '{}' AND p.text LIKE 'pooler n=%'")
    for stage in ("transfer", "head"):
        mean = sql(capture("gpu-q1c16-main"), q.format(stage))[0][0]
        assert r.stages[stage].share.mean_pct == pytest.approx(mean, rel=1e-9)
    b = r.stages["head"]
    assert b.share.p50_pct <= b.share.p99_pct <= 100
    dom = fired(r)[("dominant-stage", "head")].evidence
    assert dom["share_of_batch_pct_mean"] == b.share.mean_pct > 50
    host = fired(r)[("host-bound", fd.BATCH_SCOPE)].evidence
    assert host["dominant_stage"] == "head"
    assert host["gpu_busy_pct_of_batch_span"] == 100 * r.overlap.gpu_busy_fraction_of_pooler_span < 50


def test_quiet_where_evidence_is_absent(results):
    for name, r in results.items():
        ids = {f.id for f in r.findings}
        # every capture launches its 15 head kernels beside one graph launch per request
        assert "no-cuda-graph" not in ids
        # the full captures: 276-282 batches, no range cut, no lost record, no CUDA work outside stages
        assert not ids & {"lost-records", "cut-window", "cuda-outside-stages"}, name
        if name.startswith("gpu"):
            assert r.lost_records == LostRecords(kernel_launches_without_gpu_record=0,
                                                 memcpy_calls_without_gpu_record=0, memcpy_records_without_call=0,
                                                 batches_after_cuda_end=0)
            assert "few-batches" not in ids
    cpu = results["cpu23-inline"]
    assert not {f.id for f in cpu.findings} & CUDA_RULES
    assert cpu.lost_records is None
    assert ("few-batches", fd.CAPTURE_SCOPE) in fired(cpu)          # 41 batches


def test_a_stage_without_time_is_never_the_place_to_look(capture):
    """Stages named but never recorded (a typo in --stages) have 0% of the span: the host-bound
    finding names no stage and its evidence has none, instead of advising to shorten one."""
    r = analyze(str(capture("gpu-q1c16-main")), StageConfig(stages=("nope", "parse0"))).result
    f = fired(r)[("host-bound", fd.BATCH_SCOPE)]
    assert f.evidence["dominant_stage"] is None and f.evidence["dominant_stage_share_pct_mean"] is None
    assert "nope" not in f.summary + f.advice and "shorten the host stages first" in f.advice
    assert {s.share.mean_pct for s in r.stages.values()} == {0.0}
    full = analyze(str(capture("gpu-q1c16-main")), StageConfig(stages=("nope", "head"))).result
    assert fired(full)[("host-bound", fd.BATCH_SCOPE)].evidence["dominant_stage"] == "head"


def test_thresholds_from_spec_and_flags(results, capture):
    r = results["gpu-q1c16-main"]
    # the same figures under other thresholds: host-bound quiet at 3%, pack quiet at 10 copies
    th = fd.thresholds({"overlap_max_pct": 3, "pack_min_copies_per_request": 10})
    ids = {(f.id, f.stage) for f in fd.evaluate(r, th)}
    assert ("host-bound", fd.BATCH_SCOPE) not in ids and ("small-h2d-copies", "transfer") not in ids
    assert ("pageable-h2d", "transfer") in ids

    spec = from_dict({**SPEC, "findings": {"sync_max_per_batch": 50}})
    assert spec.config.findings == (("sync_max_per_batch", 50.0),)
    assert from_dict(spec.to_dict()).findings == spec.findings
    a = analyze(str(capture("gpu-q1c16-main")), spec.config).result
    assert ("sync-in-stage", "transfer") not in fired(a)              # 48.5 syncs per batch <= 50
    assert a.findings_thresholds["sync_max_per_batch"] == 50.0
    for bad in ({"no_such": 1}, {"overlap_max_pct": "x"}, {"overlap_max_pct": -1}, {"overlap_max_pct": True}):
        with pytest.raises(SpecError):
            from_dict({**SPEC, "findings": bad})
    assert StageConfig().findings == ()


def test_cli_findings_json_markdown_and_threshold_flag():
    cmd = ["analyze", "traces/gpu-main-slice.sqlite"]
    p = run_main(*cmd, "-f", "json", "--threshold", "overlap_max_pct=1", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    ids = {(f["id"], f["stage"]) for f in r["findings"]}
    assert ("pageable-h2d", "transfer") in ids and ("host-bound", fd.BATCH_SCOPE) not in ids
    assert ("few-batches", fd.CAPTURE_SCOPE) in ids                 # a 48-batch slice
    p = run_main(*cmd, "-f", "markdown", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    md = p.stdout
    assert "#### Findings" in md and "`pageable-h2d`: 9.00 pageable H2D copies per request" in md
    assert "% of batch span mean" in md
    bad = run_main(*cmd, "--threshold", "nope=1", cwd=ROOT)
    assert bad.returncode == 1 and "unknown findings threshold 'nope'" in bad.stderr


def test_compare_says_resolved_and_still_there():
    p = run_main("compare", "--arm", "main=traces/gpu-main-slice.sqlite", "--arm", "pr=traces/gpu-pr-slice.sqlite",
                 "-f", "json", "-B", "200", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    comp = json.loads(out)
    by = {(f["id"], f["stage"]): f for f in comp["findings"]}
    page = by[("pageable-h2d", "transfer")]
    assert page["status"] == {"pr": "resolved"}
    assert (page["arms"]["main"]["value"], page["arms"]["pr"]["value"]) == (9.0, 0.0)
    assert page["arms"]["main"]["fired_in"] == 1 and page["arms"]["pr"]["fired_in"] == 0
    assert page["arms"]["pr"]["evidence"]["h2d_copies"] == 3 * 436            # the evidence in the pr arm too
    assert by[("small-h2d-copies", "transfer")]["status"] == {"pr": "still there"}
    lines = fd.compare_lines(comp)
    assert "pageable H2D copies in transfer (`pageable-h2d`): resolved (9 → 0 per request)" in lines
    assert "small H2D copies in transfer (`small-h2d-copies`): still there (9 → 3 per request)" in lines
