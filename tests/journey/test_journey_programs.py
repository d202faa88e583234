"""Journeys of real programs recorded with nsys on this CPU: a coroutine server with two batches in
flight on two executor threads, a two-process server (API process + worker, ids over a queue) and
the demo server under `clef-prof record` with its load. Every segment of every request is held
against tests/journey_oracle.py (its own SQL), and the segments sum to end-to-end exactly."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clef_prof.analyze.pipeline import analyze
from conftest import ROOT
from httpcheck import free_port
from journey_oracle import check, compute
from recording import profile

PROGRAMS = ROOT / "tests" / "programs"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.nsys("2022.4", "2023.4")
@pytest.mark.parametrize("version", ["2022.4", "2023.4"])
def test_coroutines_two_batches_in_flight(tmp_path, version):
    db = profile([sys.executable, PROGRAMS / "journey_async.py", "120"], tmp_path / "cap", version, ENV, tmp_path)
    a = analyze(str(db))
    check(a, compute(db))
    j = a.result.journey
    assert j.request_ranges == j.complete == 120 and j.unclaimed_batch_ids == 0
    assert j.without_enqueue == j.without_encode == 0
    t = a.journeys
    assert (t["encode_ns"] > 0).all() and (t["after_batch_ns"] >= 0).all()
    # two batches in flight: some batch starts before the one before it has ended, on the other thread
    b = a.stages.batches
    overlap = b["start"][1:] < b["end"][:-1]
    assert overlap.any() and len(set(b["gtid"].tolist())) == 2
    # every request range is a start/end range on the loop's thread, whose encode is its own
    assert len(set(t["gtid"].tolist())) == 1


@pytest.mark.nsys("2023.4")
def test_two_processes_ids_over_a_queue(tmp_path):
    db = profile([sys.executable, PROGRAMS / "journey_procs.py", "90"], tmp_path / "cap", "2023.4", ENV, tmp_path)
    a = analyze(str(db))
    check(a, compute(db))
    j = a.result.journey
    assert j.request_ranges == j.complete == 90 and j.unclaimed_batch_ids == 0 and j.without_encode == 0
    t = a.journeys
    b = a.stages.batches
    req_pid = set((t["gtid"] >> 24).tolist())
    batch_pid = set((b["gtid"] >> 24).tolist())
    assert len(req_pid) == len(batch_pid) == 1 and req_pid != batch_pid


@pytest.mark.nsys("2023.4")
def test_demo_server_recorded_with_load(tmp_path):
    out, port = tmp_path / "rec", free_port()
    p = subprocess.run([sys.executable, "-m", "clef_prof", "record", "--out", str(out), "--url",
                        f"http://127.0.0.1:{port}", "--warmup", "1", "--duration", "2", "-q", "--",
                        sys.executable, "-m", "clef_prof", "demo-server", "--port", str(port), "--variant", "pr"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    db = out / "capture.sqlite"
    a = analyze(str(db))
    check(a, compute(db))
    j = a.result.journey
    m = json.loads((out / "manifest.json").read_text())
    assert j.complete > 100 and j.without_enqueue == 0 and j.without_batch == 0
    # within the client's bounds for the recorded span: at least the requests sent and answered inside
    # it (each one's handler opened its range there), at most those in flight during it
    cap = m["client"]["capture"]
    assert cap["requests_inside"] <= j.request_ranges <= cap["requests_overlapping"]
    assert j.client is not None and j.client.client_completions == m["client"]["capture"]["completions"]
