"""analyze's typed result (clef_prof.analyze.model): `to_json()` is the JSON contract, key for key and
in order, on real captures; figures are read by attribute; results pickle (analyze_many)."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest

from clef_prof.analyze.model import (SCHEMA, BatchFigures, CudaCounts, CudaPerRequest, Finding, LostRecords, Result,
                                     StageFigures, ThreadFacts)
from clef_prof.analyze.pipeline import analyze

ROOT = Path(__file__).resolve().parents[2]
SLICES = ("gpu-main-slice", "gpu25-pr-slice", "cpu23-inline")


@pytest.fixture(scope="module")
def results():
    return {n: analyze(str(ROOT / "traces" / f"{n}.sqlite")).result for n in SLICES}


def _keys(node, path=""):
    """Every key path of a JSON value, in order (list items by index)."""
    if isinstance(node, dict):
        out = []
        for k, v in node.items():
            out += [f"{path}.{k}", *_keys(v, f"{path}.{k}")]
        return out
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _keys(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("name", SLICES)
def test_to_json_is_the_cli_json(results, name):
    """The CLI's JSON, read back, equals to_json(): the same keys in the same order, the same values."""
    path = str(ROOT / "traces" / f"{name}.sqlite")
    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", path, "-f", "json"], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    doc = json.loads(p.stdout)
    mine = results[name].to_json()
    assert _keys(mine) == _keys(doc)
    assert mine == doc
    assert json.dumps(mine, indent=2) + "\n" == p.stdout
    assert list(doc)[:5] == ["schema", "path", "requests", "requests_source", "batches"]
    assert doc["schema"] == SCHEMA


def test_stage_block_keys_are_the_documented_ones(results):
    """The flat JSON stage block is made of the typed parts: host figures, CudaCounts, CudaPerRequest
    (suffixed `_per_request`) and the share of the batch span."""
    r = results["gpu-main-slice"]
    block = r.to_json()["stages"]["transfer"]
    cuda = [f.name for f in fields(CudaCounts)]
    per = [f"{f.name}_per_request" for f in fields(CudaPerRequest)]
    share = ["share_of_batch_pct_mean", "share_of_batch_pct_p50", "share_of_batch_pct_p99"]
    assert list(block) == ["instances", "host_ns_total", "host_ms_total", "host_ms_per_request",
                           "outside_batch_instances", "outside_batch_host_ms_per_request",
                           "host_ms_mean", "host_ms_p50", "host_ms_p99", *cuda, *per, *share]
    pooler = r.to_json()["pooler"]
    assert list(pooler) == ["name", "instances", "host_ns_total", "host_ms_total", "host_ms_per_request",
                            "host_ms_mean", "host_ms_p50", "host_ms_p99", *cuda, *per, "span_union_ms_total"]


def test_attribute_access_for_a_stage(results):
    """The main slice (traces README): 256 requests in 48 batches, 9 pageable H2D copies of 380 B
    per request in transfer, 15 kernel launches and one graph launch per request in head."""
    r = results["gpu-main-slice"]
    assert isinstance(r, Result) and (r.requests, r.batches) == (256, 48)
    t = r.stages["transfer"]
    assert isinstance(t, StageFigures) and isinstance(t.cuda, CudaCounts)
    assert t.cuda.h2d_copies == t.cuda.h2d_pageable == 9 * 256 and t.cuda.h2d_pinned == 0
    assert t.cuda.h2d_pinned_pct == 0.0
    assert t.cuda_per_request.h2d_copies == 9.0 == r.per_request.h2d_copies
    assert t.cuda_per_request.h2d_bytes == t.cuda.h2d_bytes / 256
    assert t.host_ms_per_request == pytest.approx(t.host_ns_total / 1e6 / 256, rel=1e-12)
    head = r.stages["head"]
    assert head.cuda_per_request.kernel_launches == 15.0 and head.cuda_per_request.graph_launches == 1.0
    assert 50 < head.share.mean_pct <= head.share.p99_pct <= 100
    assert isinstance(r.pooler, BatchFigures) and r.pooler.name == r.config.batch == "pooler"
    assert r.pooler.instances == 48 and r.pooler.cuda.h2d_copies == r.totals.h2d_copies
    assert r.lost_records == LostRecords(0, 0, 0, 0)
    assert all(isinstance(t, ThreadFacts) for t in r.capture.threads)
    f = next(f for f in r.findings if (f.id, f.stage) == ("pageable-h2d", "transfer"))
    assert isinstance(f, Finding) and f.severity == "high" and f.evidence["pageable_copies_per_request"] == 9.0
    # the dotted JSON names compare and arm_means use
    assert r.figure("stages.transfer.h2d_copies_per_request") == 9.0
    assert r.figure("per_request.pooler_host_ms") == r.per_request.pooler_host_ms
    assert r.figure("stages.nope.host_ms_per_request") is None


def test_without_cuda_every_cuda_figure_is_none(results):
    r = results["cpu23-inline"]
    assert not r.capture.cuda_traced and r.lost_records is None
    for s in r.stages.values():
        assert set(s.cuda.to_json().values()) == {None} and set(s.cuda_per_request.to_json().values()) == {None}
    assert r.totals == CudaCounts() and r.per_request.gpu_busy_ms is None
    assert r.overlap.gpu_busy_fraction_of_pooler_span is None
    assert r.per_request.pooler_host_ms == pytest.approx(r.pooler.host_ms_total / 400, rel=1e-12)


@pytest.mark.parametrize("name", SLICES)
def test_results_pickle(results, name):
    """analyze_many returns results across processes: they pickle and come back equal."""
    r = results[name]
    back = pickle.loads(pickle.dumps(r))
    assert back == r and back.to_json() == r.to_json()


def test_the_manifest_key_is_written_only_when_there_is_one(results):
    r = results["gpu25-pr-slice"]
    assert "manifest" not in r.to_json()
    doc = replace(r, manifest="/x/manifest.json").to_json()
    assert list(doc)[-1] == "manifest" and doc["manifest"] == "/x/manifest.json"
