"""Captures recorded with `clef-prof record` on the GPU machine (nsys 2025.3, CUPTI 13, CUDA 13.0
driver): real third-party code (a transformers BertModel behind aiohttp, stages injected from
tests/programs/bertsrv.toml into `python -m bertsrv.server`) and the demo server with one
`.item()` per request in `transfer`. Every count analyze gives is checked by an independent SQL
query, and against what the server counted itself (tests/data/*.truth.json)."""
from __future__ import annotations

from pathlib import Path

import pytest

from clef_prof.annotate import spec as spec_mod
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.judge.manifest import check_manifest
from conftest import sql

ROOT = Path(__file__).resolve().parents[2]
BERT = "gpu25-bertsrv"
SYNC = "gpu25-sync-slice"

# ranges of the domain `clef` with their names (registered strings or ASCII messages)
RANGES = """
    WITH r AS (SELECT e.start, e."end", e.globalTid AS tid, COALESCE(e.text, s.value) AS name
               FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
               WHERE e.eventType IN (59, 60) AND e.domainId = (SELECT domainId FROM NVTX_EVENTS
                      WHERE eventType = 75 AND text = 'clef'))
"""



def calls_in(path, stage: str, api_like: str) -> int:
    """Runtime API calls whose name matches `api_like` and that lie inside a `stage` range on
    the same thread."""
    return sql(path, RANGES + """
        SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME c JOIN StringIds n ON n.id = c.nameId
        JOIN r ON r.tid = c.globalTid AND r.start <= c.start AND c."end" <= r."end"
        WHERE r.name = ? AND n.value LIKE ?""", stage, api_like)[0][0]


def copies_in(path, stage: str, kind: int) -> int:
    """MEMCPY rows of copyKind `kind` whose API call lies inside a `stage` range on its thread."""
    return sql(path, RANGES + """
        SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN CUPTI_ACTIVITY_KIND_RUNTIME c
          ON c.correlationId = m.correlationId AND (c.globalTid >> 24) = (m.globalPid >> 24)
        JOIN r ON r.tid = c.globalTid AND r.start <= c.start AND c."end" <= r."end"
        WHERE r.name = ? AND m.copyKind = ?""", stage, kind)[0][0]


@pytest.fixture(scope="module")
def bert(capture):
    path = capture(BERT)
    cfg = spec_mod.load(str(ROOT / "tests" / "programs" / "bertsrv.toml")).config
    return path, analyze(str(path), cfg).result


def test_bert_requests_and_batches_match_the_server_and_sql(bert, truth):
    path, r = bert
    t = truth(BERT)
    sizes = [int(name.split("n=")[1].split()[0]) for (name,) in sql(path, RANGES + "SELECT name FROM r WHERE name LIKE 'pooler n=%'")]
    assert r.batches == len(sizes) == t["server_counts"]["batches"] == 149
    assert r.requests == sum(sizes) == t["server_counts"]["requests"] == 1264
    # the client's bounds for the span the server was recorded in hold the count: no false alarm
    manifest = {"status": "ok", "client": {"capture": t["client"]}, "server_counts": t["server_counts"],
                "window": {"mode": "profiler-api"}, "load": {"concurrency": 16}}
    assert check_manifest(r, manifest) == []
    assert t["client"]["requests_inside"] <= r.requests <= t["client"]["requests_overlapping"]


def test_bert_stages_cuda_work_by_sql(bert):
    path, r = bert
    st = r.stages
    assert r.capture.nsys_version.startswith("2025.3") and r.capture.cuda_driver_version == 13000
    # BatchEncoding.to: input_ids, token_type_ids, attention_mask, one pageable H2D copy each per batch
    assert st["transfer"].cuda.h2d_copies == copies_in(path, "transfer", 1) == 3 * 149
    assert st["transfer"].cuda.h2d_pageable == 3 * 149
    # half through the runtime (cudaLaunchKernel), half straight through the driver (cuLaunchKernelEx,
    # cuBLASLt's way): two calls, two kernels, each kernel row paired to its own call
    runtime, driver = calls_in(path, "head", "cudaLaunchKernel%"), calls_in(path, "head", "cuLaunchKernel%")
    assert (runtime, driver) == (4321, 4321)
    assert st["head"].cuda.kernel_launches == runtime + driver == st["head"].cuda.gpu_kernels == 8642
    assert st["head"].cuda.h2d_copies == 0 and st["parse"].cuda.kernel_launches == 0
    # each pageable copy waits for its stream: 3 synchronizing calls per batch in transfer
    assert st["transfer"].cuda.sync_calls == calls_in(path, "transfer", "cudaStreamSynchronize%") == 447


def test_bert_encode_outside_the_batch_is_a_stage(bert):
    """respond() runs on the event-loop thread, outside every batch range of the batcher thread:
    counted, timed per request of the capture, and said to lie outside the batch."""
    path, r = bert
    rows = sql(path, RANGES + """
        SELECT count(*), sum(e."end" - e.start) FROM r e WHERE e.name = 'encode' AND NOT EXISTS (
            SELECT 1 FROM r b WHERE b.tid = e.tid AND b.name LIKE 'pooler n=%' AND b.start <= e.start
            AND e."end" <= b."end")""")[0]
    enc = r.stages["encode"]
    assert enc.instances == enc.outside_batch_instances == rows[0] == 1254
    assert enc.host_ms_per_request == pytest.approx(rows[1] / 1e6 / 1264, rel=1e-9)
    batch_tids = {t for (t,) in sql(path, RANGES + "SELECT DISTINCT tid FROM r WHERE name LIKE 'pooler n=%'")}
    enc_tids = {t for (t,) in sql(path, RANGES + "SELECT DISTINCT tid FROM r WHERE name = 'encode'")}
    assert enc_tids.isdisjoint(batch_tids)


def test_bert_findings(bert):
    path, r = bert
    found = {(f.id, f.stage): f for f in r.findings}
    sync = found[("sync-in-stage", "transfer")]
    assert sync.evidence["syncs_per_request"] == pytest.approx(447 / 1264)
    assert ("host-bound", "(batch)") in found
    assert not [k for k in found if k[0] == "pageable-h2d"]     # 0.35 copies per request: under the threshold


def test_sync_in_transfer_counted_per_request(capture, truth):
    """The demo server with `--sync item`: one .item() per request in transfer, i.e. one D2H copy
    and one stream synchronize per request; the finding says so."""
    path = capture(SYNC)
    r = analyze(str(path)).result
    exp = truth(SYNC)["expected_per_request_in_transfer"]
    n = sum(int(name.split("n=")[1].split()[0])
            for (name,) in sql(path, RANGES + "SELECT name FROM r WHERE name LIKE 'pooler n=%'"))
    assert r.requests == n == 653
    tr = r.stages["transfer"]
    assert tr.cuda.sync_calls == calls_in(path, "transfer", "cudaStreamSynchronize%") == exp["stream_syncs"] * n
    assert tr.cuda.d2h_copies == copies_in(path, "transfer", 2) == exp["d2h_copies"] * n
    assert tr.cuda.h2d_copies == copies_in(path, "transfer", 1) == exp["h2d_copies"] * n
    sync = next(f for f in r.findings if f.id == "sync-in-stage" and f.stage == "transfer")
    assert sync.severity == "high" and sync.evidence["syncs_per_request"] == pytest.approx(1.0)
    assert not [f for f in r.findings if f.id == "sync-in-stage" and f.stage != "transfer"]
