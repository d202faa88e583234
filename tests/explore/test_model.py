"""clef_prof.open / clef_prof.explore.frames.Capture: frames agree with analyze's figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import clef_prof
from clef_prof.base.errors import ClefError
from clef_prof.explore.frames import Capture, arm_means, clear_cache, parse_rids

TRACES = Path(__file__).resolve().parents[2] / "traces"
PR = TRACES / "gpu-pr-slice.sqlite"
MAIN = TRACES / "gpu-main-slice.sqlite"
GPU25 = TRACES / "gpu25-pr-slice.sqlite"
CPU = TRACES / "cpu23-inline.sqlite"


@pytest.fixture(scope="module")
def pr():
    return clef_prof.open(PR)


@pytest.fixture(scope="module")
def main():
    return clef_prof.open(MAIN)


def test_open_caches_and_reopens(pr):
    assert isinstance(pr, Capture)
    assert clef_prof.open(PR) is pr
    assert clef_prof.open(str(PR)) is pr
    fresh = clef_prof.open(PR, cache=False)
    assert fresh is not pr and fresh.result.requests == pr.result.requests
    other = clef_prof.open(PR, stages="parse,transfer")
    assert other is not pr and other.stage_names == ("parse", "transfer")
    assert "436 requests" in repr(pr)


def test_clear_cache():
    a = clef_prof.open(CPU)
    clear_cache()
    assert clef_prof.open(CPU) is not a


def test_bad_input_is_a_clef_error(tmp_path):
    with pytest.raises(ClefError, match="no such file"):
        clef_prof.open(tmp_path / "missing.sqlite")
    (tmp_path / "x.sqlite").write_text("not a database")
    with pytest.raises(ClefError):
        clef_prof.open(tmp_path / "x.sqlite")


def test_stages_frame(pr):
    st = pr.stages
    assert list(st.columns) == ["batch", "stage", "start_ns", "end_ns", "duration_ns", "duration_ms", "batch_size",
                                "pid", "process", "tid", "thread"]
    assert isinstance(st["stage"].dtype, pd.CategoricalDtype)
    assert list(st["stage"].cat.categories) == list(pr.stage_names)
    for name, block in pr.result.stages.items():
        sub = st[st["stage"] == name]
        assert len(sub) == block.instances
        assert int(sub["duration_ns"].sum()) == block.host_ns_total
    assert (st["duration_ns"] == st["end_ns"] - st["start_ns"]).all()
    assert set(st["pid"]) == {721} and set(st["tid"]) == {721}
    assert set(st["process"]) == {"python3"} and set(st["thread"]) == {"python3"}


def test_batches_and_requests(pr):
    b, r = pr.batches, pr.requests
    assert len(b) == pr.result.batches == 80
    assert (b["batch"].to_numpy() == np.arange(len(b))).all()
    assert int(b["size"].sum()) == pr.n_requests == len(r) == 436
    assert b["message"].str.startswith("pooler n=").all()
    assert (b["message"] == "pooler n=" + b["size"].astype(str)).all()
    assert int(b["h2d_copies"].sum()) == pr.result.pooler.cuda.h2d_copies
    for s in pr.stage_names:
        assert int(b[f"{s}_ns"].sum()) == int(pr.stages.loc[pr.stages["stage"] == s, "duration_ns"].sum())
    assert ((b["gpu_busy_fraction"] >= 0) & (b["gpu_busy_fraction"] <= 1)).all()
    # requests: each batch expanded by its size, in order
    assert (r.groupby("batch").size().to_numpy() == b["size"].to_numpy()).all()
    assert (r.groupby("batch")["position"].max().to_numpy() == b["size"].to_numpy() - 1).all()
    assert r["rid"].isna().all()                      # this workload's messages carry no rid=
    assert r["h2d_copies"].eq(3.0).all()


def test_request_ids_from_messages(pr):
    assert parse_rids("pooler n=3 rid=a1,b2,c3") == ["a1", "b2", "c3"]
    assert parse_rids("pooler n=1, rid=17") == ["17"]
    assert parse_rids("pooler n=2 request_ids=x,y") == ["x", "y"]
    assert parse_rids("pooler n=2") == [] and parse_rids("") == []
    cap = Capture(pr.analysis)                      # a fresh view: messages as if they carried ids
    msgs = np.array([f"pooler n={n} rid=" + ",".join(f"r{i}-{k}" for k in range(n))
                     for i, n in enumerate(pr.analysis.stages.batches["size"])], dtype=object)
    cap.__dict__["_messages"] = msgs
    req = cap.requests
    assert req["rid"].notna().all()
    first = req[req["batch"] == 0]
    assert list(first["rid"]) == [f"r0-{k}" for k in range(len(first))]


def test_transfers_pr_pinned_3_per_request(pr):
    t = pr.transfers
    h2d = t[(t["direction"] == "H2D") & (t["batch"] >= 0)]
    assert set(h2d["stage"].astype(str)) == {"transfer"}
    assert set(h2d["memory"].astype(str)) == {"pinned"}
    assert int(h2d["copies"].sum()) / pr.n_requests == 3
    assert int(h2d["bytes"].sum()) / pr.n_requests == 3424
    assert (h2d.groupby("batch").size() == pr.batches.set_index("batch")["size"] * 3).all()
    d2h = t[t["direction"] == "D2H"]
    assert set(d2h["src_kind"].astype(str)) == {"device"}
    assert (t["call_start_ns"] <= t["start_ns"]).all()
    assert t["start_ns"].is_monotonic_increasing


def test_transfers_main_pageable_9_per_request(main):
    t = main.transfers
    h2d = t[(t["direction"] == "H2D") & (t["batch"] >= 0)]
    assert set(h2d["memory"].astype(str)) == {"pageable"}
    assert int(h2d["copies"].sum()) / main.n_requests == 9


def test_launches_and_kernels(pr):
    la = pr.launches
    head = la[la["stage"] == "head"]
    assert (head["kind"] == "kernel").sum() == pr.result.stages["head"].cuda.kernel_launches
    assert (head["kind"] == "graph").sum() == pr.result.stages["head"].cuda.graph_launches
    k = la[la["kind"] == "kernel"]
    assert (k["gpu_kernels"] == 1).all() and (k["gpu_start_ns"] >= k["start_ns"]).all()
    g = la[la["kind"] == "graph"]                  # graph-mode trace in nsys 2023.4: no GPU record
    assert (g["gpu_kernels"] == 0).all() and g["gpu_start_ns"].isna().all()
    assert len(pr.kernels) == pr.result.totals.gpu_kernels
    assert set(pr.gpu_busy["kind"].astype(str)) == {"kernel", "memcpy"}
    assert len(pr.api_calls) == len(pr.analysis.calls)


def test_graph_trace_rows_in_gpu_busy():
    cap = clef_prof.open(GPU25)
    g = cap.gpu_busy[cap.gpu_busy["kind"] == "graph"]
    assert len(g) == cap.result.totals.graph_executions > 0


def test_summary_matches_result(pr):
    s = pr.summary()
    assert list(s.index) == [*pr.stage_names, "pooler (batch)"]
    assert s.loc["transfer", "h2d_copies_per_request"] == 3.0
    assert s.loc["head", "kernel_launches_per_request"] == 15.0
    assert s.loc["pooler (batch)", "host_ms_per_request"] == pytest.approx(pr.per_request.pooler_host_ms)
    assert s["graph_kernels"].isna().all()          # null in the contract -> NaN


def test_cpu_capture_has_empty_cuda_frames():
    cap = clef_prof.open(CPU)
    assert not cap.cuda_traced
    for frame in (cap.transfers, cap.launches, cap.kernels, cap.gpu_busy, cap.api_calls):
        assert len(frame) == 0
    assert {"direction", "memory", "stage", "bytes"} <= set(cap.transfers.columns)
    s = cap.summary()
    assert "h2d_copies" not in s.columns and (s["instances"] > 0).all()
    assert "h2d_copies" not in cap.batches.columns
    assert len(cap.requests) == cap.n_requests == 400
    assert set(cap.stages["tid"]) == {10345}
    assert set(cap.stages["process"]) == {"python"}     # the base name of /var/tmp/vnv-0.2.11/bin/python
    assert set(cap.stages["thread"]) == {""}          # the export names no thread of that process


def test_arm_means(pr, main):
    comp = arm_means({"main": main, "pr": pr})
    by = {m["metric"]: m for m in comp["metrics"]}
    h2d = by["per_request.h2d_copies"]
    assert h2d["arms"]["main"]["mean"] == 9 and h2d["arms"]["pr"]["mean"] == 3
    assert h2d["change"] == -6 and h2d["ci"] is None
    assert "stages.transfer.host_ms_per_request" in by
