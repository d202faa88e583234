"""Findings at the edge of each threshold and severity cut-off (issue 21 item 8).

The rule table in the README is the oracle: `pageable-h2d` fires at >= 0.5 pageable copies per
request, `sync-in-stage` at > 1 synchronizing call per batch, `host-bound` below 50% GPU busy, and
so on. Each case takes analyze's result of a real capture (gpu25-bertsrv: 1264 requests in 149
batches) and sets one figure exactly on a default threshold, then just across it, so that a
threshold moved or a `>=` turned into `>` changes the outcome. Severities: a rule's "high" starts at
one offending call per request (pageable copies, synchronizing calls) or below half the overlap
threshold.
"""
from __future__ import annotations

import math
import sqlite3
from dataclasses import replace

import pytest

from clef_prof.analyze.judge import findings as fd
from clef_prof.analyze.model import CudaCounts, LostRecords
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.config import ThresholdError, parse_threshold, thresholds


@pytest.fixture(scope="module")
def base(capture):
    r = analyze(str(capture("gpu25-bertsrv"))).result
    assert (r.requests, r.batches) == (1264, 149)
    return r


def severity(result, rule: str, scope: str, th=None):
    """The severity the rule gives `scope` (None: it does not fire)."""
    found = [f for f in fd.evaluate(result, th) if (f.id, f.stage) == (rule, scope)]
    return found[0].severity if found else None


def stage(r, name: str, **cuda):
    st = r.stages[name]
    return replace(r, stages={**r.stages, name: replace(st, cuda=replace(st.cuda, **cuda))})


@pytest.mark.parametrize("pageable, sev", [(631, None), (632, "medium"), (1263, "medium"), (1264, "high")])
def test_pageable_at_half_and_one_per_request(base, pageable, sev):
    r = stage(base, "transfer", h2d_pageable=pageable, h2d_copies=1264)
    assert severity(r, "pageable-h2d", "transfer") == sev


@pytest.mark.parametrize("copies, bytes_per_copy, sev", [(3 * 1264, 65536, "medium"), (3 * 1264 - 1, 65536, None),
                                                         (3 * 1264, 65536.5, None)])
def test_small_copies_at_three_per_request_of_64_kib(base, copies, bytes_per_copy, sev):
    r = stage(base, "transfer", h2d_copies=copies, h2d_bytes=int(bytes_per_copy * copies), h2d_pageable=0)
    assert severity(r, "small-h2d-copies", "transfer") == sev


@pytest.mark.parametrize("syncs, sev", [(149, None), (150, "medium"), (1263, "medium"), (1264, "high")])
def test_sync_above_one_per_batch_high_from_one_per_request(base, syncs, sev):
    r = stage(base, "transfer", sync_calls=syncs, device_syncs=0, sync_memcpy_calls=0)
    assert severity(r, "sync-in-stage", "transfer") == sev


def test_synchronous_memcpy_calls_count_as_syncs(base):
    r = stage(base, "transfer", sync_calls=149, device_syncs=0, sync_memcpy_calls=1)
    assert severity(r, "sync-in-stage", "transfer") == "medium"


@pytest.mark.parametrize("launches, graphs, sev", [(12640, 0, "medium"), (12639, 0, None), (12640, 1, None)])
def test_no_graph_from_ten_launches_per_request(base, launches, graphs, sev):
    r = stage(base, "head", kernel_launches=launches, graph_launches=graphs)
    assert severity(r, "no-cuda-graph", "head") == sev


@pytest.mark.parametrize("busy, sev", [(0.5, None), (0.4999, "medium"), (0.25, "medium"), (0.2499, "high")])
def test_host_bound_below_half_busy_high_below_a_quarter(base, busy, sev):
    r = replace(base, overlap=replace(base.overlap, gpu_busy_fraction_of_pooler_span=busy))
    assert severity(r, "host-bound", fd.BATCH_SCOPE) == sev


@pytest.mark.parametrize("share, sev", [(50.0, "medium"), (49.999, None)])
def test_dominant_stage_from_half_the_span(base, share, sev):
    st = base.stages["parse"]
    r = replace(base, stages={**base.stages, "parse": replace(st, share=replace(st.share, mean_pct=share))})
    assert severity(r, "dominant-stage", "parse") == sev


@pytest.mark.parametrize("total, sev", [(29800, "low"), (29801, None)])
def test_outside_stages_from_one_percent(base, total, sev):
    # bertsrv: 149 kernel launches and 149 memcpy calls in batches but no stage (298 calls)
    ev = fd.evidence(base, "cuda-outside-stages", fd.OUTSIDE_SCOPE)
    assert ev["outside_work_calls"] == 298
    r = replace(base, totals=CudaCounts(kernel_launches=total, graph_launches=0, memcpy_calls=0, memset_calls=0))
    assert severity(r, "cuda-outside-stages", fd.OUTSIDE_SCOPE) == sev


@pytest.mark.parametrize("batches, sev", [(100, None), (99, "low")])
def test_few_batches_below_one_hundred(base, batches, sev):
    assert severity(replace(base, batches=batches), "few-batches", fd.CAPTURE_SCOPE) == sev


@pytest.mark.parametrize("field", ["kernel_launches_without_gpu_record", "memcpy_calls_without_gpu_record",
                                   "memcpy_records_without_call"])
def test_one_lost_record_is_high(base, field):
    none = LostRecords(0, 0, 0, 0)
    assert severity(replace(base, lost_records=none), "lost-records", fd.CAPTURE_SCOPE) is None
    r = replace(base, lost_records=replace(none, **{field: 1}))
    assert severity(r, "lost-records", fd.CAPTURE_SCOPE) == "high"


def test_one_cut_range_is_info(base):
    assert severity(base, "cut-window", fd.CAPTURE_SCOPE) is None
    r = replace(base, excluded=replace(base.excluded, cut_at_edges={"pooler": 1}))
    assert severity(r, "cut-window", fd.CAPTURE_SCOPE) == "info"


IN_STAGE = ("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId "
            "JOIN NVTX_EVENTS e ON e.globalTid = r.globalTid AND r.start >= e.start AND r.start < e.[end] "
            "JOIN StringIds s ON s.id = e.textId WHERE s.value = '{stage}' AND {what}")


def test_thresholds_at_a_real_figure(base, capture):
    """Overridden thresholds set on the capture's own figures (SQL), and the next float across them."""
    path = capture("gpu25-bertsrv")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    one = lambda q: con.execute(q).fetchone()[0]        # noqa: E731
    req = one("SELECT sum(CAST(substr(text, 10) AS INT)) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'")
    batches = one("SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'")
    pageable = one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0")
    syncs = one(IN_STAGE.format(stage="transfer", what="n.value LIKE 'cudaStreamSynchronize%'"))
    launches = one(IN_STAGE.format(stage="head", what="r.correlationId IN (SELECT correlationId FROM "
                                                       "CUPTI_ACTIVITY_KIND_KERNEL)"))
    h2d_bytes = one("SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")
    con.close()
    assert (req, batches, pageable, syncs, launches) == (1264, 149, 447, 447, 8642)
    for rule in ("pageable-h2d", "small-h2d-copies"):
        assert fd.evidence(base, rule, "transfer")["h2d_bytes_per_request"] == pytest.approx(h2d_bytes / req)
    up = lambda x: math.nextafter(x, math.inf)          # noqa: E731
    down = lambda x: math.nextafter(x, -math.inf)       # noqa: E731
    sev = lambda rule, scope, key, v: severity(base, rule, scope, thresholds({key: v}))   # noqa: E731
    assert severity(base, "pageable-h2d", "transfer") is None                   # 0.35 per request < 0.5
    assert sev("pageable-h2d", "transfer", "pageable_min_per_request", pageable / req) == "medium"
    assert sev("pageable-h2d", "transfer", "pageable_min_per_request", up(pageable / req)) is None
    assert sev("sync-in-stage", "transfer", "sync_max_per_batch", syncs / batches) is None
    assert sev("sync-in-stage", "transfer", "sync_max_per_batch", down(syncs / batches)) == "medium"
    assert sev("no-cuda-graph", "head", "graph_min_launches_per_request", launches / req) == "medium"
    assert sev("no-cuda-graph", "head", "graph_min_launches_per_request", up(launches / req)) is None
    assert sev("few-batches", fd.CAPTURE_SCOPE, "p99_min_batches", batches) is None
    assert sev("few-batches", fd.CAPTURE_SCOPE, "p99_min_batches", batches + 1) == "low"


@pytest.mark.parametrize("value, ok", [("0", True), ("-0.0", True), ("-1e-300", False), ("inf", False), ("nan", False)])
def test_threshold_values_from_zero(value, ok):
    if ok:
        assert parse_threshold(f"overlap_max_pct={value}") == ("overlap_max_pct", 0.0)
    else:
        with pytest.raises(ThresholdError, match="finite number >= 0"):
            parse_threshold(f"overlap_max_pct={value}")
