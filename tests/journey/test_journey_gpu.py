"""Journeys of a real GPU recording: the demo server (variant pr) with its request ranges, recorded by
`clef-prof record` under nsys 2025.3 on an H200 (scripts/gpu-journey.sh), scrubbed, in tests/data.
Every segment of every request is held against tests/journey_oracle.py (its own SQL)."""
from __future__ import annotations

import json
import shutil

import pytest

from clef_prof.analyze.pipeline import analyze
from journey_oracle import check, compute
from conftest import DATA

NAME = "gpu25-journey"


@pytest.fixture(scope="module")
def gpu(capture):
    return analyze(str(capture(NAME)))


def test_every_segment_matches_the_sql(gpu, capture):
    oracle = compute(capture(NAME))
    check(gpu, oracle)
    j = gpu.result.journey
    # the recording: 2,225 request ranges, 16 still open when the window closed, 15 batch ids of
    # requests whose ranges opened before it (nsys keeps no range open at the start)
    assert (j.request_ranges, j.cut_by_window, j.unclaimed_batch_ids, j.without_batch) == (2225, 16, 15, 0)
    assert j.complete == 2209 and j.without_enqueue == 0 and j.out_of_order == 0
    assert set(j.listed["cut_by_window"]) <= set(oracle.cut) and len(j.listed["cut_by_window"]) == 16
    assert set(j.listed["unclaimed_batch_ids"]) == oracle.unclaimed


def test_figures_are_the_requests_own(gpu):
    """mean/p50/p99/share from the per-request rows by hand; shares of the segments make 100%."""
    import numpy as np

    t = gpu.journeys
    ok = ~t["cut"] & (t["batch"] >= 0)
    e2e = t["e2e_ns"][ok]
    j = gpu.result.journey
    total = 0.0
    for s, f in j.segments.items():
        v = t[f"{s}_ns"][ok]
        assert f.mean_ms == pytest.approx(v.mean() / 1e6, rel=1e-12)
        assert f.p99_ms == pytest.approx(np.percentile(v, 99) / 1e6, rel=1e-12)
        total += f.share_pct
        tail = e2e >= np.percentile(e2e, 99)
        assert f.tail_mean_ms == pytest.approx(v[tail].mean() / 1e6, rel=1e-12)
    assert total == pytest.approx(100.0, abs=1e-9)
    # the demo's encode runs inside the batch: no front-end encode, so after_batch and encode are 0
    assert j.segments["encode"].mean_ms == 0 and j.segments["after_batch"].mean_ms == 0
    assert j.segments["batch"].share_pct > 50           # 7.8 of 13.6 ms: the batch is the largest part
    parts = sum(f.mean_ms for f in j.batch_stages.values())
    assert parts == pytest.approx(j.segments["batch"].mean_ms, rel=1e-9)


def test_client_check_agrees(capture, tmp_path):
    """With the record manifest beside it, the journeys' mean end-to-end (13.58 ms) and the load
    generator's mean latency in the recorded span (16.12 ms over 2,223 completions) agree within
    2 ms + 25% of the client's mean."""
    shutil.copy(capture(NAME), tmp_path / "capture.sqlite")
    shutil.copy(DATA / f"{NAME}.manifest.json", tmp_path / "manifest.json")
    r = analyze(str(tmp_path / "capture.sqlite")).result
    c = r.journey.client
    m = json.loads((DATA / f"{NAME}.manifest.json").read_text())["client"]["capture"]
    assert c.client_latency_ms_mean == m["latency_ms_mean"] and c.client_completions == m["completions"]
    assert c.journey_e2e_ms_mean == r.journey.e2e_ms_mean
    assert c.gap_ms == pytest.approx(m["latency_ms_mean"] - r.journey.e2e_ms_mean)
    assert c.agrees and not any(w.startswith("client check") for w in r.warnings)
    # a client that saw three times the latency is a warning with both numbers
    m2 = json.loads((DATA / f"{NAME}.manifest.json").read_text())
    m2["client"]["capture"]["latency_ms_mean"] = 3 * m["latency_ms_mean"]
    (tmp_path / "manifest.json").write_text(json.dumps(m2))
    r2 = analyze(str(tmp_path / "capture.sqlite")).result
    assert not r2.journey.client.agrees
    w = [w for w in r2.warnings if w.startswith("client check")]
    assert len(w) == 1 and f"{r2.journey.e2e_ms_mean:.3f} ms" in w[0] and f"{3 * m['latency_ms_mean']:.3f} ms" in w[0]
