"""analyze against the ground truth of the real captures in tests/data."""
from __future__ import annotations

import sqlite3

import pytest

from clef_prof.base import cupti
from clef_prof.analyze.pipeline import analyze

GPU = {
    # name: requests, batches, h2d copies, h2d bytes, pinned?, head launches, graph launches, d2h copies
    "gpu-q1c16-main": (1520, 282, 13680, 5_204_480, False, 22800, 1520, 282),
    "gpu-q1c16-pr": (1517, 276, 4551, 5_194_208, True, 22755, 1517, 276),
    "gpu25-q1c16-pr": (1517, 277, 4551, 5_194_208, True, 22755, 1517, 277),
}


@pytest.fixture(scope="module")
def results(capture):
    return {name: analyze(str(capture(name))).result for name in [*GPU, "cpu23-inline"]}


@pytest.mark.parametrize("name", list(GPU))
def test_gpu_counts_match_truth(results, truth, name):
    req, batches, h2d, h2d_bytes, pinned, launches, graphs, d2h = GPU[name]
    r = results[name]
    gt = truth(name)["ground_truth"]
    assert (r.requests, r.batches) == (req, batches) == (gt["requests"], gt["batches"])
    assert r.requests_source == "message n=K"
    assert r.totals.h2d_copies == h2d
    assert r.totals.h2d_bytes == h2d_bytes
    assert r.stages["transfer"].cuda.h2d_copies == h2d
    assert r.outside_stages.outside_batch.h2d_copies == 0
    assert r.per_request.h2d_bytes == 3424.0
    assert r.per_request.h2d_copies == pytest.approx(h2d / req)
    t = r.stages["transfer"]
    assert (t.cuda.h2d_pinned, t.cuda.h2d_pageable) == ((h2d, 0) if pinned else (0, h2d))
    head = r.stages["head"]
    assert head.cuda.kernel_launches == launches
    assert head.cuda_per_request.kernel_launches == 15.0
    assert head.cuda.graph_launches == graphs == req
    assert head.cuda.d2h_copies == d2h == r.totals.d2h_copies
    assert r.capture.graph_trace_mode == "graph"
    assert head.cuda.graph_kernels is None  # graph mode: no per-kernel GPU record
    # nsys 2023.4 (CUPTI 12.4) on the CUDA 13.0 driver: said; nothing else
    assert r.warnings == ([] if name.startswith("gpu25") else cupti.check("2023.4.4.54", 13000))


def test_main_vs_pr_per_request(results):
    assert results["gpu-q1c16-main"].per_request.h2d_copies == 9.0
    assert results["gpu-q1c16-pr"].per_request.h2d_copies == 3.0


def test_graph_trace_rows_counted_in_2025(results):
    r = results["gpu25-q1c16-pr"]
    assert r.capture.nsys_version == "2025.3.2.0"
    assert r.capture.schema_version == "3.20.3"
    assert r.stages["head"].cuda.graph_executions == 1517
    assert results["gpu-q1c16-main"].stages["head"].cuda.graph_executions is None


def test_capture_facts(results):
    c = results["gpu-q1c16-main"].capture
    assert c.nsys_version == "2023.4.4.54" and c.schema_version == "3.7.2"
    assert c.duration_s == pytest.approx(1.492009192)
    assert [(t.pid, t.tid, t.batches) for t in c.threads] == [(615, 615, 282)]


def test_cpu_capture_host_totals_equal_sql(results, capture):
    r = results["cpu23-inline"]
    assert (r.requests, r.batches) == (400, 41)
    assert r.capture.cuda_traced is False
    assert r.totals.h2d_copies is None and r.per_request.kernel_launches is None
    assert any("CUDA was not traced" in w for w in r.warnings)
    con = sqlite3.connect(f"file:{capture('cpu23-inline')}?mode=ro", uri=True)
    sql = dict(con.execute(
        "SELECT s.value, SUM(e.[end] - e.start) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType = 59 GROUP BY s.value").fetchall())
    for stage in ("parse", "index", "transfer", "head", "encode"):
        assert r.stages[stage].host_ns_total == sql[stage]
        assert r.stages[stage].instances == 41
    pooler_ns = sum(v for k, v in sql.items() if k.startswith("pooler "))
    assert r.pooler.host_ns_total == pooler_ns


def test_cli_analyzes_several_captures_in_order(capture):
    import json
    import subprocess
    import sys
    paths = [capture("gpu-q1c16-pr"), capture("gpu-q1c16-main")]
    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", *map(str, paths), "-f", "json", "--jobs", "2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [r["requests"] for r in out] == [1517, 1520]
    assert [r["per_request"]["h2d_copies"] for r in out] == [3.0, 9.0]
