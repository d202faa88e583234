"""The figures each finding carries (its evidence) and the text it renders, against SQL over real
captures and over copies of them changed by SQL the way a real capture goes wrong: no batch size in
the batch ranges, one GPU record lost, CUDA records that stop before NVTX does, a device
synchronize inside a stage. Evidence a reader or `compare` sees must be the capture's own figure,
with its denominator; rules whose figure is absent (no batch size, no CUDA) give no evidence.

gpu25-bertsrv: 1264 requests in 149 batches; stages parse, transfer, head, and `encode` once per
request outside the batches; no `index` range; 596 cudaMemsetAsync calls, no graph launch.
gpu-q1c16-main: 1520 requests in 282 batches, one cudaGraphLaunch per request, no memset.
"""
from __future__ import annotations


import numpy as np
import pytest

from clef_prof.analyze.judge import findings as fd
from clef_prof.analyze.pipeline import analyze
from clef_prof.annotate.spec import from_dict
from clef_prof.base.config import thresholds
from clef_prof.explore.text import findings_markdown
from conftest import SAMPLES_IN_HEAD, edited_copy, loop_union, sql

# the batch ranges' message, inline (text) or registered (textId)
_BATCH = ("FROM NVTX_EVENTS e LEFT JOIN StringIds t ON t.id = e.textId WHERE COALESCE(e.text, t.value) LIKE 'pooler n=%'")
REQUESTS = f"SELECT SUM(CAST(substr(COALESCE(e.text, t.value), 10) AS INT)) {_BATCH}"
BATCHES = f"SELECT count(*) {_BATCH}"
# CUDA API calls by name (`what` over n.value and r.*), whose start lies in a range named `stage` on
# the same thread (both sides filtered first: the join is then over a few thousand rows)
IN_STAGE = ("WITH c AS MATERIALIZED (SELECT r.globalTid g, r.start t FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "JOIN StringIds n ON n.id = r.nameId WHERE {what}), st AS MATERIALIZED (SELECT e.globalTid g, e.start s, "
            "e.[end] e FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = '{stage}') "
            "SELECT count(*) FROM c JOIN st ON st.g = c.g AND c.t >= st.s AND c.t < st.e")
LAUNCH = "n.value LIKE 'cudaLaunchKernel%' OR n.value LIKE 'cuLaunchKernel%'"
# the work calls of the capture: kernel launches, graph launches, memcpy and memset calls
WORK = ("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId WHERE "
        "n.value LIKE 'cudaLaunchKernel%' OR n.value LIKE 'cuLaunchKernel%' OR n.value LIKE 'cudaGraphLaunch%' OR "
        "n.value LIKE 'cudaMemcpy%' OR n.value LIKE 'cudaMemset%'")
CUDA_RULES = [r for r in fd.RULES if r.id in ("pageable-h2d", "small-h2d-copies", "sync-in-stage", "no-cuda-graph",
                                               "host-bound", "cuda-outside-stages")]


@pytest.fixture(scope="module")
def bert(capture):
    return analyze(str(capture("gpu25-bertsrv"))).result


@pytest.fixture(scope="module")
def main(capture):
    return analyze(str(capture("gpu-q1c16-main"))).result


@pytest.fixture(scope="module")
def changed(capture, tmp_path_factory):
    """changed(name, *statements) -> the path of a writable copy of a capture with the SQL run on it."""
    def make(name: str, *statements: str):
        return edited_copy(capture(name), tmp_path_factory.mktemp("changed") / f"{name}.sqlite", *statements)
    return make


NO_SIZE = ("UPDATE NVTX_EVENTS SET text = 'pooler', uint64Value = NULL, int64Value = NULL, uint32Value = NULL, "
           "int32Value = NULL WHERE text LIKE 'pooler n=%'")


def first_in_stage(path, stage: str, what: str) -> tuple[int, int]:
    """(rowid, correlationId) of the first CUDA API call matching `what` whose start lies in `stage`."""
    q = IN_STAGE.replace("r.globalTid g, r.start t", "r.globalTid g, r.start t, r.rowid i, r.correlationId k")
    q = q.replace("SELECT count(*) FROM c", "SELECT c.i, c.k FROM c") + " ORDER BY c.t LIMIT 1"
    return sql(path, q.format(stage=stage, what=what))[0]


def lost_kernel(path) -> str:
    """Deletes the GPU record of the first kernel launched (through the driver) in `head`."""
    corr = first_in_stage(path, "head", "n.value = 'cuLaunchKernelEx'")[1]
    return f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = {corr}"


def test_no_batch_size_gives_no_per_request_evidence_but_lost_records_still_fire(changed, capture):
    """Batch ranges without `n=K` or a payload: no request count, so no per-request evidence of any
    CUDA rule (not a division by zero), while a lost GPU record, which needs no request count, is
    still reported (it was silent before: the lost-records rule asked for requests too)."""
    path = changed("gpu25-bertsrv", NO_SIZE, lost_kernel(capture("gpu25-bertsrv")))
    launches = sql(path, IN_STAGE.format(stage="head", what=LAUNCH))[0][0]
    kernels = sql(path, IN_STAGE.format(stage="head", what=f"({LAUNCH}) AND r.correlationId IN "
                                                           "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"))[0][0]
    assert (launches, launches - kernels) == (8642, 1)
    r = analyze(str(path)).result
    assert r.requests is None and r.batches == sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'pooler'")[0][0]
    assert r.capture.cuda_traced
    for rule in CUDA_RULES:
        for scope in fd._scopes(rule, r):
            assert fd.evidence(r, rule.id, scope) is None, (rule.id, scope)
    found = {(f.id, f.stage): f for f in r.findings}
    assert set(found) == {("lost-records", fd.CAPTURE_SCOPE)}
    lost = found[("lost-records", fd.CAPTURE_SCOPE)]
    assert lost.severity == "high"
    assert lost.evidence == {"kernel_launches_without_gpu_record": launches - kernels,
                             "memcpy_calls_without_gpu_record": 0, "memcpy_records_without_call": 0}
    assert lost.summary == "CUDA records were lost: 1 kernel launches without gpu record"
    # stage rules do not judge without a request count, even where a host share crosses its threshold
    assert r.stages["head"].share.mean_pct > 40
    assert {f.id for f in fd.evaluate(r, thresholds({"dominant_share_pct": 40}))} == {"lost-records"}


def test_cpu_capture_gives_no_cuda_evidence(capture):
    """cpu23-inline was recorded without CUDA trace (no CUDA table at all): no CUDA rule has evidence."""
    path = capture("cpu23-inline")
    assert not sql(path, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'CUPTI%'")[0][0]
    r = analyze(str(path)).result
    assert r.requests == sql(path, REQUESTS)[0][0] == 400
    for rule in [*CUDA_RULES, fd.RULE["lost-records"]]:
        for scope in fd._scopes(rule, r):
            assert fd.evidence(r, rule.id, scope) is None, (rule.id, scope)


def test_h2d_bytes_per_request_is_sql_bytes_over_sql_requests(bert, capture):
    path = capture("gpu25-bertsrv")
    req = sql(path, REQUESTS)[0][0]
    h2d = sql(path, "SELECT count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")[0]
    assert (req, h2d[0]) == (1264, 447)
    for rule in ("pageable-h2d", "small-h2d-copies"):
        ev = fd.evidence(bert, rule, "transfer")
        assert ev["h2d_bytes_per_request"] == pytest.approx(h2d[1] / req, rel=1e-12)
        assert ev["requests"] == req
    ev = fd.evidence(bert, "small-h2d-copies", "transfer")
    assert ev["bytes_per_copy"] == pytest.approx(h2d[1] / h2d[0], rel=1e-12)
    page = fd.evidence(bert, "pageable-h2d", "transfer")
    assert page["pageable_copies"] == page["h2d_copies"] == h2d[0]
    assert page["pageable_pct_of_h2d_copies"] == 100.0


def test_pack_counts_the_stage_ranges_or_the_batches(bert, capture):
    """`batches` of small-h2d-copies is the number of the stage's ranges (one packed copy each);
    a stage with no range falls back to the batches."""
    path = capture("gpu25-bertsrv")
    encodes = sql(path, "SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                        "WHERE s.value = 'encode'")[0][0]
    batches, req = sql(path, BATCHES)[0][0], sql(path, REQUESTS)[0][0]
    assert (encodes, batches) == (1254, 149)
    enc = fd.evidence(bert, "small-h2d-copies", "encode")
    assert enc["batches"] == encodes
    assert enc["copies_per_request_if_packed"] == pytest.approx(encodes / req, rel=1e-12)
    idx = fd.evidence(bert, "small-h2d-copies", "index")          # no index range in this capture
    assert idx["batches"] == batches
    assert idx["copies_per_request_if_packed"] == pytest.approx(batches / req, rel=1e-12)
    assert fd.evidence(bert, "sync-in-stage", "index") is None     # syncs per batch of no range: absent


def test_zero_pageable_copies_never_fire_even_at_threshold_zero(bert):
    """A threshold of 0 means any pageable copy fires: a stage with none still does not."""
    th = thresholds({"pageable_min_per_request": 0})
    fired = {f.stage for f in fd.evaluate(bert, th) if f.id == "pageable-h2d"}
    assert fired == {"transfer"}                                   # 447 pageable copies; head, parse: none
    assert fd.evidence(bert, "pageable-h2d", "head")["pageable_copies"] == 0


def test_a_device_synchronize_in_a_stage_is_split_from_stream_syncs(changed, capture):
    """One of transfer's cudaStreamSynchronize calls renamed cudaDeviceSynchronize (a name the capture
    already holds): the evidence and the text split them by SQL's counts."""
    row = first_in_stage(capture("gpu25-bertsrv"), "transfer", "n.value LIKE 'cudaStreamSynchronize%'")[0]
    rename = ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = (SELECT id FROM StringIds WHERE value = "
              f"'cudaDeviceSynchronize_v3020') WHERE rowid = {row}")
    path = changed("gpu25-bertsrv", rename)
    stream = sql(path, IN_STAGE.format(stage="transfer", what="n.value LIKE 'cudaStreamSynchronize%'"))[0][0]
    device = sql(path, IN_STAGE.format(stage="transfer", what="n.value LIKE 'cudaDeviceSynchronize%'"))[0][0]
    req, batches = sql(path, REQUESTS)[0][0], sql(path, BATCHES)[0][0]
    assert (stream, device) == (446, 1)
    r = analyze(str(path)).result
    f = {(f.id, f.stage): f for f in r.findings}[("sync-in-stage", "transfer")]
    ev = f.evidence
    assert (ev["syncs"], ev["stream_or_event_syncs"], ev["device_syncs"]) == (stream + device, stream, device)
    assert ev["synchronous_memcpy_calls"] == 0
    assert f.summary == (f"{(stream + device) / req:.2f} waits for the GPU per request ({(stream + device) / batches:.2f}"
                         f" per batch; {stream:,} stream/event synchronize, {device:,} device synchronize over {req:,} "
                         "requests) in transfer")


D2H_IN_STAGE = ("n.value LIKE 'cudaMemcpy%' AND r.correlationId IN (SELECT correlationId FROM "
                "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2)")


def test_a_d2h_readback_is_a_wait_for_the_gpu(changed, capture):
    """#35 B11: BertModel.forward (head) reads one byte back per batch. On the recording a
    cudaStreamSynchronize follows each (pinned): one wait each, not two. With those synchronize
    calls deleted (a readback into pageable memory blocks by itself) the D2H copies are still the
    stage's waits, counted and named; SQL counts both."""
    path = capture("gpu25-bertsrv")
    d2h = sql(path, IN_STAGE.format(stage="head", what=D2H_IN_STAGE))[0][0]
    syncs = sql(path, IN_STAGE.format(stage="head", what="n.value LIKE 'cudaStreamSynchronize%'"))[0][0]
    one_byte = sql(path, "SELECT count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 AND bytes = 1")[0]
    req, batches = sql(path, REQUESTS)[0][0], sql(path, BATCHES)[0][0]
    assert (d2h, syncs, batches) == (149, 149, 149) and one_byte == (149, 149)
    th = thresholds({"sync_max_per_batch": 0.5})
    ev = fd.evidence(analyze(str(path)).result, "sync-in-stage", "head")
    assert (ev["syncs"], ev["synchronizing_calls"], ev["d2h_readbacks"], ev["d2h_bytes"]) == (149, 149, 149, 149)
    cut = changed("gpu25-bertsrv", "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid IN (SELECT r.rowid FROM "
                  "CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId JOIN NVTX_EVENTS e ON "
                  "e.globalTid = r.globalTid AND r.start >= e.start AND r.start < e.[end] JOIN StringIds s ON "
                  "s.id = e.textId WHERE s.value = 'head' AND n.value LIKE 'cudaStreamSynchronize%')")
    assert sql(cut, IN_STAGE.format(stage="head", what="n.value LIKE 'cudaStreamSynchronize%'"))[0][0] == 0
    r = analyze(str(cut)).result
    f = {(f.id, f.stage): f for f in fd.evaluate(r, th)}[("sync-in-stage", "head")]
    assert (f.evidence["syncs"], f.evidence["synchronizing_calls"], f.evidence["d2h_readbacks"]) == (d2h, 0, d2h)
    assert f.summary == (f"{d2h / req:.2f} waits for the GPU per request ({d2h / batches:.2f} per batch; {d2h:,} D2H "
                         f"readbacks of 1 B on average over {req:,} requests) in head")


def test_sync_text_names_only_the_kinds_present(main, capture):
    path = capture("gpu-q1c16-main")
    syncs = sql(path, IN_STAGE.format(stage="transfer", what="n.value LIKE 'cudaStreamSynchronize%'"))[0][0]
    req, batches = sql(path, REQUESTS)[0][0], sql(path, BATCHES)[0][0]
    f = {(f.id, f.stage): f for f in main.findings}[("sync-in-stage", "transfer")]
    assert f.summary == (f"{syncs / req:.2f} waits for the GPU per request ({syncs / batches:.2f} per batch; "
                         f"{syncs:,} stream/event synchronize over {req:,} requests) in transfer")
    assert f.summary.startswith("9.00 waits for the GPU per request (48.51 per batch; 13,680 stream/event")


def test_one_sync_in_a_stage_fires_at_threshold_zero(bert):
    """A stage with exactly one synchronizing call crosses a threshold of 0 per batch."""
    st = bert.stages["parse"]
    assert st.cuda.sync_calls == 0
    from dataclasses import replace
    r = replace(bert, stages={**bert.stages, "parse": replace(st, cuda=replace(st.cuda, sync_calls=1))})
    th = thresholds({"sync_max_per_batch": 0})
    sev = {f.stage: f.severity for f in fd.evaluate(r, th) if f.id == "sync-in-stage"}
    assert sev["parse"] == "medium"
    assert "parse" not in {f.stage for f in fd.evaluate(bert, th) if f.id == "sync-in-stage"}


@pytest.mark.parametrize("name, memsets, graphs", [("gpu25-bertsrv", 596, 0), ("gpu-q1c16-main", 0, 1520)])
def test_capture_work_calls_count_graph_launches_and_memsets(name, memsets, graphs, capture, bert, main):
    path = capture(name)
    r = bert if name == "gpu25-bertsrv" else main
    q = "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId WHERE n.value LIKE '{}%'"
    assert (sql(path, q.format("cudaMemset"))[0][0], sql(path, q.format("cudaGraphLaunch"))[0][0]) == (memsets, graphs)
    ev = fd.evidence(r, "cuda-outside-stages", fd.OUTSIDE_SCOPE)
    assert ev["capture_work_calls"] == sql(path, WORK)[0][0]


def test_outside_stages_text_and_share(bert, capture):
    """bertsrv issues one kernel launch and one memcpy per batch between its stages."""
    path = capture("gpu25-bertsrv")
    stages = "('parse', 'transfer', 'head', 'encode')"
    outside = ("WITH c AS MATERIALIZED (SELECT r.globalTid g, r.start t FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
               "StringIds n ON n.id = r.nameId WHERE {what}), b AS MATERIALIZED (SELECT globalTid g, start s, [end] e "
               "FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'), st AS MATERIALIZED (SELECT e.globalTid g, e.start s, "
               f"e.[end] e FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value IN {stages}) "
               "SELECT count(*) FROM c JOIN b ON b.g = c.g AND c.t >= b.s AND c.t < b.e WHERE NOT EXISTS "
               "(SELECT 1 FROM st WHERE st.g = c.g AND c.t >= st.s AND c.t < st.e)")
    k = sql(path, outside.format(what=LAUNCH))[0][0]
    m = sql(path, outside.format(what="n.value LIKE 'cudaMemcpy%'"))[0][0]
    work = sql(path, WORK)[0][0]
    assert (k, m, work) == (149, 149, 10132)
    f = {(f.id, f.stage): f for f in bert.findings}[("cuda-outside-stages", fd.OUTSIDE_SCOPE)]
    assert f.evidence["outside_pct_of_capture"] == pytest.approx(100 * (k + m) / work, rel=1e-12)
    assert f.summary == (f"{k + m:,} of {work:,} CUDA work calls of the capture ({100 * (k + m) / work:.1f}%) lie outside "
                         f"every stage: in a batch but no stage: {k:,} kernel launches, {m:,} memcpy calls; outside "
                         "every batch: none")


def test_no_cuda_work_is_zero_percent_outside(changed):
    """A traced capture whose server issued no CUDA work: 0 of 0 calls outside stages is 0%, not absent."""
    path = changed("gpu25-bertsrv", "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME", "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
                   "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET")
    r = analyze(str(path)).result
    assert r.capture.cuda_traced and r.requests == 1264
    ev = fd.evidence(r, "cuda-outside-stages", fd.OUTSIDE_SCOPE)
    assert (ev["outside_work_calls"], ev["capture_work_calls"], ev["outside_pct_of_capture"]) == (0, 0, 0.0)
    assert "cuda-outside-stages" not in {f.id for f in r.findings}


def test_batches_after_the_last_cuda_record_are_a_cut_not_lost_records(changed, capture):
    """CUDA records that stop at the start of the 120th batch while NVTX goes on (a killed
    capture): the batches after the last CUDA record are excluded and said by cut-window (info);
    lost-records stays quiet: no call or GPU record lost its partner."""
    src = capture("gpu25-bertsrv")
    t = sql(src, "SELECT start FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' ORDER BY start LIMIT 1 OFFSET 119")[0][0]
    gone = "correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= {t})"
    path = changed("gpu25-bertsrv", *(f"DELETE FROM {tb} WHERE " + gone.format(t=t) for tb in (
        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")),
        f"DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= {t}")
    last = sql(path, "SELECT max([end]) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    late = sql(path, f"SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' AND [end] > {last}")[0][0]
    assert late >= 149 - 120 + 1
    r = analyze(str(path)).result
    assert r.batches == 149 - late
    f = {(f.id, f.stage): f for f in r.findings}
    assert ("lost-records", fd.CAPTURE_SCOPE) not in f
    cut = f[("cut-window", fd.CAPTURE_SCOPE)]
    assert cut.severity == "info" and cut.evidence["batches_after_cuda_end"] == late
    assert cut.summary == (f"0 ranges cut by the capture window; {late:,} batches after the last CUDA record were "
                           f"excluded; {149 - late:,} batches kept")
    assert set(fd.evidence(r, "lost-records", fd.CAPTURE_SCOPE)) == {
        "kernel_launches_without_gpu_record", "memcpy_calls_without_gpu_record", "memcpy_records_without_call"}


def test_evidence_reads_the_thresholds_given(bert):
    assert fd.evidence(bert, "few-batches", fd.CAPTURE_SCOPE)["p99_min_batches"] == 100
    ev = fd.evidence(bert, "few-batches", fd.CAPTURE_SCOPE, thresholds({"p99_min_batches": 500}))
    assert ev == {"batches": 149, "p99_min_batches": 500}


def test_no_batch_range_no_share_evidence(capture):
    """A spec whose batch name matches no range: no batch, so no stage share and no p99 to warn about."""
    spec = from_dict({"batch": {"name": "nosuch"}, "stages": {s: f"m:{s}" for s in ("parse", "transfer", "head")}})
    r = analyze(str(capture("gpu25-bertsrv")), spec.config).result
    assert r.batches == 0
    for s in r.stages:
        assert fd.evidence(r, "dominant-stage", s) is None
    assert fd.evidence(r, "few-batches", fd.CAPTURE_SCOPE) is None
    assert r.findings == []


def test_host_bound_p50_is_the_median_batch_overlap(main, capture):
    """gpu_busy_pct_p50_per_batch: the median over batches of the % of each batch's host span the GPU
    (kernels and copies of its process) was busy, by interval arithmetic over SQL rows."""
    path = capture("gpu-q1c16-main")
    batches = np.array(sql(path, "SELECT start, [end] FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'"), dtype=np.int64)
    gpu = np.array(sql(path, "SELECT start, [end] FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                             "SELECT start, [end] FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY 1"), dtype=np.int64)
    merged = loop_union(gpu[:, 0], gpu[:, 1])
    ms, me = np.array(merged).T
    pct = [100 * np.clip(np.minimum(me, be) - np.maximum(ms, bs), 0, None).sum() / (be - bs) for bs, be in batches]
    ev = {(f.id, f.stage): f for f in main.findings}[("host-bound", fd.BATCH_SCOPE)].evidence
    assert ev["gpu_busy_pct_p50_per_batch"] == pytest.approx(float(np.median(pct)), rel=1e-9)
    assert ev["batches"] == len(batches) == 282


def test_markdown_says_no_rule_fired(capture):
    """cpu23-inline (41 batches, head 91% of the span) with the two rules that fire moved past its figures."""
    spec = from_dict({"batch": {}, "stages": {s: f"m:{s}" for s in ("parse", "index", "transfer", "head", "encode")},
                      "findings": {"p99_min_batches": 41, "dominant_share_pct": 100}})
    r = analyze(str(capture("cpu23-inline")), spec.config).result
    assert r.batches == sql(capture("cpu23-inline"), BATCHES)[0][0] == 41
    assert r.findings == [] and fd.lines(r) == []
    assert findings_markdown(r) == ["", "#### Findings", "",
                              "No rule fired (thresholds: `clef-prof analyze -f json`, `findings_thresholds`)."]


@pytest.mark.parametrize("v, text", [(None, "—"), (2.5, "2.50"), (9.0, "9"), (12345.0, "12,345"), (1520, "1,520"),
                                     (0, "0"), (1 / 3, "0.33")])
def test_compare_values_render(v, text):
    """A mean of 9 copies per request reads '9', a fraction two decimals; an integer (a JSON number
    written without a point) as itself."""
    assert fd._fmt(v) == text


def test_compare_skips_captures_without_evidence(bert, changed, capture):
    """An arm whose first capture has no batch size: its mean is over the captures with the figure,
    and the evidence shown is the first capture that has it, fired or not."""
    nosize = analyze(str(changed("gpu25-bertsrv", NO_SIZE))).result
    comp = fd.compare_findings({"main": [bert], "pr": [nosize, bert]}, "main")
    by = {(f["id"], f["stage"]): f for f in comp}
    sync = by[("sync-in-stage", "transfer")]
    assert sync["arms"]["pr"]["fired_in"] == 1 and sync["arms"]["pr"]["captures"] == 2
    assert sync["arms"]["pr"]["value"] == sync["arms"]["main"]["value"] == 447 / 1264
    assert sync["arms"]["pr"]["evidence"] == fd.evidence(bert, "sync-in-stage", "transfer")
    alone = fd.compare_findings({"main": [bert], "pr": [nosize]}, "main")
    pr = {(f["id"], f["stage"]): f for f in alone}[("sync-in-stage", "transfer")]["arms"]["pr"]
    assert (pr["value"], pr["evidence"], pr["fired_in"]) == (None, None, 0)
    # the same figure under a threshold it does not cross (3 syncs per batch <= 50): not fired, still shown
    spec = from_dict({"batch": {}, "stages": {s: f"m:{s}" for s in ("parse", "index", "transfer", "head", "encode")},
                      "findings": {"sync_max_per_batch": 50}})
    quiet = analyze(str(capture("gpu25-bertsrv")), spec.config).result
    comp = fd.compare_findings({"main": [bert], "pr": [nosize, quiet]}, "main")
    pr = {(f["id"], f["stage"]): f for f in comp}[("sync-in-stage", "transfer")]["arms"]["pr"]
    assert (pr["fired_in"], pr["value"]) == (0, 447 / 1264)
    assert pr["evidence"] == fd.evidence(bert, "sync-in-stage", "transfer")


def test_lost_launches_count_only_inside_batches(changed, capture):
    """gpu25-concurrent launches 6 kernels outside every batch range and 240 inside: with the GPU
    records of those 6 and of one launched inside a batch deleted, one launch inside a batch lost
    its record (the figures of stages and batches are short by it); the 6 outside count in no figure."""
    src = capture("gpu25-concurrent")
    calls = ("WITH c AS MATERIALIZED (SELECT r.globalTid g, r.start t, r.correlationId k FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
             f"JOIN StringIds n ON n.id = r.nameId WHERE {LAUNCH}), b AS MATERIALIZED (SELECT globalTid g, start s, "
             "[end] e FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%') SELECT c.k FROM c WHERE {inside} EXISTS "
             "(SELECT 1 FROM b WHERE b.g = c.g AND c.t >= b.s AND c.t < b.e) ORDER BY c.t")
    outside = [k for k, in sql(src, calls.format(inside="NOT"))]
    inside = [k for k, in sql(src, calls.format(inside=""))]
    assert (len(outside), len(inside)) == (6, 240)
    gone = ", ".join(map(str, [*outside, inside[0]]))
    path = changed("gpu25-concurrent", f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IN ({gone})")
    r = analyze(str(path)).result
    assert r.lost_records.kernel_launches_without_gpu_record == 1
    f = {(f.id, f.stage): f for f in r.findings}[("lost-records", fd.CAPTURE_SCOPE)]
    assert f.evidence["kernel_launches_without_gpu_record"] == 1


@pytest.mark.parametrize("stage, batch, want", [
    ([5, 0], [10, 0], [50.0]),              # a batch range of zero length (start == end) has no share
    ([1, 3], [1, 4], [100.0, 75.0]),        # a 1 ns batch is a batch
    ([0, 0], [0, 0], None),                 # no batch of positive length: no share at all
])
def test_stage_shares_by_hand(stage, batch, want):
    got = fd.stage_shares(np.array(stage, np.int64), np.array(batch, np.int64))
    if want is None:
        assert got == fd.BatchShare()
    else:
        assert got.mean_pct == pytest.approx(sum(want) / len(want), rel=1e-12)
        assert (got.p50_pct, got.p99_pct) == (pytest.approx(float(np.percentile(want, 50))),
                                              pytest.approx(float(np.percentile(want, 99))))


def test_dominant_stage_names_its_sampled_functions(capture, truth):
    """cpu23-sampled: tests/programs/sampled_split.py under nsys 2023.4 with clef-prof's sampler at
    200 Hz, no CUDA; its `head` stage calls three(3K) then one(K) (3:1 by construction, measured by
    the program). The dominant-stage finding lists the stage's sampled functions, most samples
    first, with the stage's sample count (SQL: sampler marks inside a head range of the thread the
    mark names), and says to look at them."""
    path = capture("cpu23-sampled")
    t = truth("cpu23-sampled")["ground_truth"]
    assert sql(path, BATCHES)[0][0] == t["batches"] == 114
    (in_head,), = sql(path, SAMPLES_IN_HEAD)
    r = analyze(str(path)).result
    assert not r.capture.cuda_traced and fd.evidence(r, "host-bound", fd.BATCH_SCOPE) is None
    f = {(f.id, f.stage): f for f in r.findings}[("dominant-stage", "head")]
    top = f.evidence["top_functions"]
    assert [x["function"] for x in top[:2]] == ["three", "one"]          # 3:1 by the program's own clock
    assert t["ns"]["three"] > 2 * t["ns"]["one"]
    assert 1 <= len(top) <= 3 and all(x["file"].endswith("sampled_split.py") for x in top[:2])
    assert all(x["stage_samples"] == in_head for x in top) and in_head >= 60
    assert sum(x["self_samples"] for x in top) <= in_head
    assert [x["self_samples"] for x in top] == sorted((x["self_samples"] for x in top), reverse=True)
    for x in top:
        assert x["self_share"] == pytest.approx(x["self_samples"] / in_head, rel=1e-12)
        assert x["self_share_low"] < x["self_share"] < x["self_share_high"]
        assert x["self_ms_per_request"] > 0
    said = ", ".join(f"{x['function']} (sampled_split.py) {100 * x['self_share']:.0f}% "
                     f"[{100 * x['self_share_low']:.0f}–{100 * x['self_share_high']:.0f}%]" for x in top)
    assert f.summary.endswith(f"; by Python samples ({in_head:,} in the stage, self, 95% interval): {said}")
    assert f.advice == "look inside head first, at the functions named, before any other stage"
    # a stage with no sample: no function, and the advice says how to get them
    ev = fd.evidence(r, "dominant-stage", "parse")
    assert ev["top_functions"] == []
    assert "record with --python-sampling" in fd.RULE["dominant-stage"].text(ev, "parse")[1]


def test_zero_thresholds_need_a_figure(bert, main):
    """Thresholds of 0 (`pack_min_copies_per_request`, `outside_min_pct`): a stage with no H2D copy
    and a capture with no CUDA work outside stages still give no finding."""
    th = thresholds({"pack_min_copies_per_request": 0})
    assert {f.stage for f in fd.evaluate(bert, th) if f.id == "small-h2d-copies"} == {"transfer"}
    assert fd.evidence(bert, "small-h2d-copies", "head")["bytes_per_copy"] is None       # 0 copies
    assert fd.evidence(main, "cuda-outside-stages", fd.OUTSIDE_SCOPE)["outside_work_calls"] == 0
    assert "cuda-outside-stages" not in {f.id for f in fd.evaluate(main, thresholds({"outside_min_pct": 0}))}


def test_graph_launches_per_request(main, capture):
    """gpu-q1c16-main replays one CUDA graph per request in head (the traces README), beside 15 kernels."""
    path = capture("gpu-q1c16-main")
    req = sql(path, REQUESTS)[0][0]
    graphs = sql(path, IN_STAGE.format(stage="head", what="n.value LIKE 'cudaGraphLaunch%'"))[0][0]
    launches = sql(path, IN_STAGE.format(stage="head", what=LAUNCH))[0][0]
    assert (graphs, launches) == (req, 15 * req)
    ev = fd.evidence(main, "no-cuda-graph", "head")
    assert ev["graph_launches_per_request"] == graphs / req == 1.0
    assert ev["kernel_launches_per_request"] == launches / req == 15.0


def test_work_outside_every_batch(capture):
    """gpu25-concurrent launches 6 kernels outside every batch range: counted with the batches'
    work outside stages, and named in the text."""
    path = capture("gpu25-concurrent")
    q = ("WITH c AS MATERIALIZED (SELECT r.globalTid g, r.start t FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n "
         "ON n.id = r.nameId WHERE {what}), b AS MATERIALIZED (SELECT globalTid g, start s, [end] e FROM NVTX_EVENTS "
         "WHERE text LIKE 'pooler n=%') SELECT count(*) FROM c WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.g = c.g "
         "AND c.t >= b.s AND c.t < b.e)")
    k = sql(path, q.format(what=LAUNCH))[0][0]
    others = sql(path, q.format(what="n.value LIKE 'cudaMemcpy%' OR n.value LIKE 'cudaMemset%' OR "
                                     "n.value LIKE 'cudaGraphLaunch%'"))[0][0]
    assert (k, others) == (6, 0)
    r = analyze(str(path)).result
    ev = fd.evidence(r, "cuda-outside-stages", fd.OUTSIDE_SCOPE)
    assert ev["outside_batches"] == {"kernel_launches": k, "graph_launches": 0, "memcpy_calls": 0, "memset_calls": 0}
    assert ev["outside_work_calls"] == sum(ev["in_batch_no_stage"].values()) + k
    assert ev["capture_work_calls"] == sql(path, WORK)[0][0]
    text = fd.RULE["cuda-outside-stages"].text(ev, fd.OUTSIDE_SCOPE)[0]
    assert text.endswith(f"; outside every batch: {k:,} kernel launches")


def test_cut_ranges_in_a_window_record_opened_are_expected(changed, tmp_path):
    """The last batch range left open (no end): cut-window says so (info); beside a record
    manifest saying record opened the window, the same cut is expected and nothing fires."""
    src = changed("gpu25-bertsrv", "UPDATE NVTX_EVENTS SET [end] = NULL WHERE rowid = (SELECT rowid FROM NVTX_EVENTS "
                                   "WHERE text LIKE 'pooler n=%' ORDER BY start DESC LIMIT 1)")
    alone = analyze(str(src)).result
    f = {(f.id, f.stage): f for f in alone.findings}[("cut-window", fd.CAPTURE_SCOPE)]
    assert f.severity == "info" and f.evidence["ranges_cut_at_edges"] == 4       # the batch and its 3 stages
    assert f.evidence["batches_kept"] == alone.batches == 148
    (tmp_path / "capture.sqlite").write_bytes(src.read_bytes())
    (tmp_path / "manifest.json").write_text('{"export": "capture.sqlite", "window": {"mode": "profiler-api"}}')
    rec = analyze(str(tmp_path / "capture.sqlite")).result
    assert rec.window_by_record and rec.excluded.cut_at_edges == alone.excluded.cut_at_edges
    assert "cut-window" not in {f.id for f in rec.findings}


def test_evidence_of_an_unknown_stage_is_absent(bert):
    assert fd.evidence(bert, "pageable-h2d", "nosuch") is None
    assert fd.evidence(bert, "dominant-stage", "nosuch") is None


def test_requests_given_but_no_batch_no_overlap_evidence(capture):
    """`--requests 1264` with a batch name that matches no range: per-request figures exist, the
    GPU share of the batch span does not."""
    spec = from_dict({"batch": {"name": "nosuch"}, "stages": {s: f"m:{s}" for s in ("parse", "transfer", "head")}})
    r = analyze(str(capture("gpu25-bertsrv")), spec.config, requests=1264).result
    assert (r.requests, r.batches) == (1264, 0)
    assert fd.evidence(r, "host-bound", fd.BATCH_SCOPE) is None
    assert fd.evidence(r, "pageable-h2d", "transfer")["pageable_copies"] == 447


def test_compare_says_new(bert, capture):
    """A finding the baseline does not have is new in the other arm."""
    spec = from_dict({"batch": {}, "stages": {s: f"m:{s}" for s in ("parse", "index", "transfer", "head", "encode")},
                      "findings": {"sync_max_per_batch": 50}})
    quiet = analyze(str(capture("gpu25-bertsrv")), spec.config).result
    comp = {(f["id"], f["stage"]): f for f in fd.compare_findings({"main": [quiet], "pr": [bert]}, "main")}
    sync = comp[("sync-in-stage", "transfer")]
    assert sync["status"] == {"pr": "new"}
    assert (sync["arms"]["main"]["fired_in"], sync["arms"]["pr"]["fired_in"]) == (0, 1)
    assert comp[("host-bound", fd.BATCH_SCOPE)]["status"] == {"pr": "still there"}


def test_host_bound_names_the_sampled_functions_of_its_dominant_stage(bert, capture):
    """bertsrv's result holding the samples of cpu23-sampled (both have a `head` stage, the dominant
    one in each): the host-bound text names head's sampled functions after its share."""
    from dataclasses import replace

    sampled = analyze(str(capture("cpu23-sampled"))).result
    r = replace(bert, samples=sampled.samples)
    f = {(f.id, f.stage): f for f in fd.evaluate(r)}[("host-bound", fd.BATCH_SCOPE)]
    top = f.evidence["top_functions"]
    assert f.evidence["dominant_stage"] == "head" and [x["function"] for x in top[:2]] == ["three", "one"]
    assert f"% of it (mean per batch); by Python samples ({top[0]['stage_samples']:,} in the stage" in f.summary
    assert f.summary.endswith(f"[{100 * top[-1]['self_share_low']:.0f}–{100 * top[-1]['self_share_high']:.0f}%]")
