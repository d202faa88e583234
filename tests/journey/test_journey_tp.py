"""Journeys on tensor-parallel ranks: tests/data/cpu23-tp-journey (scripts/make-tp-journey-capture.py),
a real nsys 2023.4 recording of tests/programs/journey_tp.py: an API process with request ranges
hands each step to 2 rank processes that both run it (same `rid=` list, same stages), and gathers
both answers before it wakes the handlers. Each request is counted once; its batch runs from the
earliest start of its batch on either rank to the latest end; the second rank's batch ids are not
unclaimed. Every segment of every request is held against tests/journey_oracle.py (its own SQL, with
ranks) and against the program's own count (the truth file); the program is also recorded afresh."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import clef_prof
from clef_prof.analyze.figures.journey import batch_stage_ns
from clef_prof.analyze.pipeline import analyze
from clef_prof.explore import text
from conftest import ROOT, edited_copy, sql
from journey_oracle import check, compute
from recording import profile
from trace_rules import violations

NAME = "cpu23-tp-journey"


def _rank_batches(db) -> dict[int, list[tuple[int, int]]]:
    """pid key -> its batch ranges' (start, end) in start order, by plain SQL."""
    out: dict[int, list] = {}
    for g, s, e in sql(db, "SELECT e.globalTid, e.start, e.\"end\" FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                           "ON s.id = e.textId WHERE e.eventType = 59 AND COALESCE(s.value, e.text) LIKE 'pooler%' "
                           "ORDER BY e.start"):
        out.setdefault(g >> 24, []).append((s, e))
    return out


def test_every_journey_on_two_ranks(capture, truth):
    db = capture(NAME)
    t_own = truth(NAME)
    a = analyze(str(db))
    oracle = compute(db, ranks=True)
    check(a, oracle)
    j = a.result.journey
    n = t_own["requests"]
    # each request once, not once per rank; every id of both ranks' batches accounted for
    assert j.request_ranges == j.complete == n == len(a.journeys) == 300
    assert j.batch_ids == n and j.replica_batch_ids == n and j.unclaimed_batch_ids == 0
    assert j.without_batch == j.cut_by_window == j.without_enqueue == j.without_encode == 0
    t = a.journeys
    assert len(set(t["rid"].tolist())) == n
    # the program's own steps: the first rank's batches, in order, of its sizes
    assert [int(x) for x in a.stages.batches["size"]] == [len(s) for s in t_own["steps"]]
    by_rank = _rank_batches(db)
    assert len(by_rank) == t_own["ranks"] == 2
    first, second = sorted(by_rank)
    assert len(by_rank[first]) == len(by_rank[second]) == len(t_own["steps"])
    # which rank ended each step last, from the SQL, is the program's own record up to naming the ranks
    later = [int(e2 > e1) for (_, e1), (_, e2) in zip(by_rank[first], by_rank[second])]
    assert later in (t_own["last_rank"], [1 - r for r in t_own["last_rank"]])
    assert 0 < sum(later) < len(later)          # now one rank ends later, now the other
    # a request's batch: the union of its step's spans on both ranks
    step = t["batch"]                           # the first rank's batches are the steps, in order (above)
    ends = np.maximum([by_rank[first][i][1] for i in step], [by_rank[second][i][1] for i in step])
    starts = np.minimum([by_rank[first][i][0] for i in step], [by_rank[second][i][0] for i in step])
    assert (t["batch_start"] == starts).all() and (t["batch_end"] == ends).all()
    assert (t["batch_ns"] == ends - starts).all()
    # the batch segment's parts close it: the first rank's stages, (no stage), (other ranks)
    parts = batch_stage_ns(t, {s: a.batch_table[f"{s}_ns"] for s in a.config.stages}, ranks=True)
    assert (sum(parts.values()) == t["batch_ns"]).all()
    assert (parts["(other ranks)"] >= 0).all() and (parts["(other ranks)"] > 0).mean() > 0.5
    assert (parts["(no stage)"] >= 0).all()
    assert "(other ranks)" in j.batch_stages
    # the data model's and the CSV's rows carry it
    df = clef_prof.open(str(db)).requests
    assert len(df) == n and (df["other_ranks_ns"].to_numpy() == t["other_ranks_ns"]).all()
    rows = list(csv.DictReader(io.StringIO(text.render_journeys_csv(t))))
    assert [int(r["other_ranks_ns"]) for r in rows] == t["other_ranks_ns"].tolist()
    # the segments close end-to-end exactly
    segs = sum(t[f"{s}_ns"] for s in ("receive", "queue", "batch", "after_batch", "encode", "send", "unattributed"))
    assert (segs == t["e2e_ns"]).all() and (t["unattributed_ns"] == 0).all()
    # the batch figures still count each step once, with a figure per rank
    assert a.result.batches == len(t_own["steps"]) and a.result.requests == n
    assert sorted(r.counted for r in a.result.ranks) == [False, True]


def test_a_second_rank_batch_without_twin(capture, tmp_path):
    """One batch of the second rank names other ids (its first rank's twin then has none): its ids are
    counted unclaimed, and the requests of that step take the first rank's span alone."""
    src = capture(NAME)
    by_rank = _rank_batches(src)
    second = sorted(by_rank)[1]
    s0 = by_rank[second][10][0]
    db = edited_copy(src, tmp_path / "edited.sqlite",
                     f"UPDATE NVTX_EVENTS SET textId = NULL, text = 'pooler n=2 rid=stray-1,stray-2' "
                     f"WHERE start = {s0} AND globalTid >> 24 = {second} AND eventType = 59")
    a = analyze(str(db))
    oracle = compute(db, ranks=True)
    check(a, oracle)
    j = a.result.journey
    assert j.unclaimed_batch_ids == 2 and j.batch_ids == 302
    assert j.listed["unclaimed_batch_ids"] == ["stray-1", "stray-2"]
    size = int(a.stages.batches["size"][10])
    assert j.complete == 300 and j.replica_batch_ids == 300 - size
    alone = a.journeys["batch"] == 10
    assert alone.sum() == size and (a.journeys["other_ranks_ns"][alone] == 0).all()
    assert (a.journeys["batch_end"][alone] == a.stages.batches["end"][10]).all()


def test_ids_after_which_a_message_goes_on(capture, tmp_path):
    """Request and enqueue messages whose id is followed by more (a blank, `;`, `)`, a Unicode space)
    or held as a registered string (textId) meet their batches as the plain ones do: analyze cuts the
    id out in SQL only where nothing follows it, and reads the others with the id pattern."""
    src = capture(NAME)
    sid = sql(src, "SELECT max(id) + 1 FROM StringIds")[0][0]
    db = edited_copy(src, tmp_path / "edited.sqlite",
                     "UPDATE NVTX_EVENTS SET text = text || ' extra=1' WHERE text = 'request rid=[rid-1]'",
                     "UPDATE NVTX_EVENTS SET text = text || ';x' WHERE text = 'request rid=[rid-2]'",
                     ("UPDATE NVTX_EVENTS SET text = text || ? WHERE text = 'request rid=[rid-3]'", ("\u2003z",)),
                     "UPDATE NVTX_EVENTS SET text = text || ')' WHERE text = 'enqueued rid=[rid-4]'",
                     f"INSERT INTO StringIds (id, value) VALUES ({sid}, 'request rid=[rid-5]')",
                     f"UPDATE NVTX_EVENTS SET text = NULL, textId = {sid} WHERE text = 'request rid=[rid-5]'")
    edited, plain = analyze(str(db)), analyze(str(src))
    check(edited, compute(db, ranks=True))
    assert edited.result.journey.complete == 300 and edited.result.journey.unclaimed_batch_ids == 0
    a, b = edited.journeys, plain.journeys
    assert {"[rid-1]", "[rid-2]", "[rid-3]", "[rid-5]"} <= set(a["rid"].tolist())
    for col in a.columns:
        assert np.array_equal(a[col], b[col]), col


@pytest.mark.nsys("2023.4")
def test_recorded_now(tmp_path):
    """The program recorded here and now (90 requests): the same rules hold on a fresh capture."""
    own = tmp_path / "own.json"
    db = profile([sys.executable, ROOT / "tests" / "programs" / "journey_tp.py", "90", own], tmp_path / "cap",
                 "2023.4", {**os.environ, "PYTHONPATH": str(ROOT)}, tmp_path, trace="nvtx")
    a = analyze(str(db))
    check(a, compute(db, ranks=True))
    j, steps = a.result.journey, json.loads(own.read_text())["steps"]
    assert j.request_ranges == j.complete == 90 and j.replica_batch_ids == j.batch_ids == 90
    assert j.unclaimed_batch_ids == 0 and len(a.stages.batches) == len(steps)


def test_chrome_trace_of_the_ranks(capture, tmp_path):
    """The Chrome trace of the TP capture holds the format's rules: each request's flow starts on its
    batch segment (from the earliest rank's start) and ends on its first rank's batch range."""
    out = tmp_path / "trace.json"
    p = subprocess.run([sys.executable, "-m", "clef_prof", "export", "--chrome-trace", str(out), str(capture(NAME))],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert violations(doc) == []
    assert doc["otherData"]["requests"] == 300
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) == sum(e["ph"] == "f" for e in doc["traceEvents"]) == 300
