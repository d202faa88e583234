"""Request ranges that end before they start, and exact duplicates of request ranges and enqueue
marks (#35 B4, B9), on a real GPU capture (gpu25-journey: the demo server under nsys 2025.3 with
request ranges) and a real torch trace (kineto-journey-pr), each edited the way a damaged, merged
or re-exported capture is. Figures are held against SQL and json over the edited files."""
from __future__ import annotations

import gzip
import json
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import edited_copy, sql

from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.errors import EXIT_STRICT

DATA = Path(__file__).resolve().parents[1] / "data"
NAME = "COALESCE(e.text, s.value)"        # nsys writes a message inline (text) or as a string id
REQ = f"""SELECT e.rowid, e.start, e."end", e.globalTid, {NAME} FROM NVTX_EVENTS e
          LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 AND {NAME} LIKE 'request rid=%'"""
MARKS = f"""SELECT e.rowid FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
            WHERE e.eventType = 34 AND {NAME} LIKE 'enqueued rid=%'"""


@pytest.fixture(scope="module")
def journey(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "gpu25-journey.sqlite"
    with lzma.open(DATA / "gpu25-journey.sqlite.xz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    out.chmod(0o444)
    return out


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clef_prof", *args], capture_output=True, text=True, timeout=300)


def test_reversed_request_ranges_are_counted_apart_from_cut(journey, tmp_path):
    base = analyze(str(journey)).result.journey
    closed = [r for r in sql(journey, REQ) if r[2] is not None]
    picked = closed[100:105]                # five closed request ranges, their ends moved before their starts
    bad = edited_copy(journey, tmp_path / "reversed.sqlite",
                      *[('UPDATE NVTX_EVENTS SET "end" = start - 1000 WHERE rowid = ?', (r[0],)) for r in picked])
    j = analyze(str(bad)).result
    reversed_ids = sorted(r[4].split("rid=", 1)[1] for r in picked)
    assert sql(bad, 'SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "end" < start')[0][0] == 5
    assert j.journey.reversed == 5
    assert sorted(j.journey.listed["reversed"]) == reversed_ids
    assert j.journey.cut_by_window == base.cut_by_window       # open at the end: as before, not the damaged ones
    assert j.journey.request_ranges == base.request_ranges
    assert j.journey.complete == base.complete - 5
    assert any("5 request ranges end before they start" in w for w in j.warnings)
    r = _cli("analyze", str(bad), "--strict")
    assert r.returncode == EXIT_STRICT, r.stderr
    assert "5 ending before they start (damaged)" in r.stdout


def test_duplicated_requests_and_marks_are_counted_once(journey, tmp_path):
    base = analyze(str(journey)).result
    cols = ", ".join(f'"{r[1]}"' for r in sql(journey, "PRAGMA table_info(NVTX_EVENTS)"))
    reqs = [r[0] for r in sql(journey, REQ)][:40]
    marks = [r[0] for r in sql(journey, MARKS)][:30]
    dup = edited_copy(journey, tmp_path / "dup.sqlite",
                      *[(f"INSERT INTO NVTX_EVENTS ({cols}) SELECT {cols} FROM NVTX_EVENTS WHERE rowid = ?", (i,))
                        for i in reqs + marks])
    assert len(sql(dup, REQ)) == len(sql(journey, REQ)) + 40
    assert len(sql(dup, MARKS)) == len(sql(journey, MARKS)) + 30
    got = analyze(str(dup)).result
    j, b = got.journey, base.journey
    assert (j.duplicate_requests, j.duplicate_marks) == (40, 30)
    assert (j.request_ranges, j.complete, j.without_batch, j.without_enqueue) == (
        b.request_ranges, b.complete, b.without_batch, b.without_enqueue)
    assert j.e2e_ms_p99 == b.e2e_ms_p99 and j.segments["queue"].mean_ms == b.segments["queue"].mean_ms
    assert any("40 request ranges and 30 enqueue marks repeat another exactly" in w for w in got.warnings)
    assert not any("repeat another exactly (thread, time, id)" in w for w in base.warnings)


def _kineto_with(tmp_path: Path, durs: dict[str, str]) -> Path:
    """kineto-journey-pr with the `dur` of the named request ranges replaced (the JSON text kept)."""
    text = lzma.open(DATA / "kineto-journey-pr.pt.trace.json.xz", "rt").read()
    doc = json.loads(text)
    for ev in doc["traceEvents"]:
        rid = ev.get("name", "").split("rid=", 1)[-1] if str(ev.get("name", "")).startswith("request rid=") else None
        if rid in durs:
            ev["dur"] = json.loads(durs[rid])
    out = tmp_path / "edited.pt.trace.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    return out


def test_kineto_negative_durations(tmp_path, monkeypatch):
    """torch writes dur -1 for an event open at the profiler's stop (pytorch#150131): cut, not
    damaged; any other negative dur ends before its start: reversed, with a warning."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    doc = json.load(lzma.open(DATA / "kineto-journey-pr.pt.trace.json.xz", "rt"))
    reqs = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("request rid=")]
    if not reqs:
        pytest.fail("kineto-journey-pr holds no request ranges")
    base = analyze(resolve(str(DATA / "kineto-journey-pr.pt.trace.json.xz"))[0]).result.journey
    ids = [e["name"].split("rid=", 1)[1] for e in reqs if e["dur"] > 0][:4]
    edited = _kineto_with(tmp_path, {ids[0]: "-1", ids[1]: "-250.5", ids[2]: "-3", ids[3]: "-1"})
    got = analyze(resolve(str(edited))[0]).result
    j = got.journey
    assert j.reversed == 2 and sorted(j.listed["reversed"]) == sorted(ids[1:3])
    assert j.cut_by_window == base.cut_by_window + 2
    assert j.complete == base.complete - 4
    assert any("2 request ranges end before they start" in w for w in got.warnings)


def test_duplicated_sampler_marks_are_counted_once(capture, tmp_path):
    """cpu23-sampled (sampled_split.py under clef-prof's sampler) with 30 of its sample marks
    repeated exactly: the samples and each stage's share stay those of the capture as recorded."""
    src = capture("cpu23-sampled")
    base = analyze(str(src)).result.samples
    cols = ", ".join(f'"{r[1]}"' for r in sql(src, "PRAGMA table_info(NVTX_EVENTS)"))
    marks = [r[0] for r in sql(src, f"""SELECT e.rowid FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                                        WHERE e.eventType = 34 AND {NAME} LIKE 't %'""")][::2][:30]
    assert len(marks) == 30
    dup = edited_copy(src, tmp_path / "dup.sqlite",
                      *[(f"INSERT INTO NVTX_EVENTS ({cols}) SELECT {cols} FROM NVTX_EVENTS WHERE rowid = ?", (i,))
                        for i in marks])
    got = analyze(str(dup)).result
    s = got.samples
    assert s.duplicates == 30 and base.duplicates == 0
    assert s.samples == base.samples and s.unreadable == base.unreadable
    assert {k: v.samples for k, v in s.stages.items()} == {k: v.samples for k, v in base.stages.items()}
    assert any("30 sample marks repeat another exactly" in w for w in got.warnings)


def test_duplicated_python_function_events_are_counted_once(tmp_path, monkeypatch):
    """kineto-bert-stack (a BERT server under torch's profiler with Python stacks) with 2,000 of its
    python_function events written twice: each stage's function time stays the trace's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = DATA / "kineto-bert-stack.pt.trace.json.xz"
    doc = json.load(lzma.open(src, "rt"))
    py = [e for e in doc["traceEvents"] if e.get("cat") == "python_function"]
    doc["traceEvents"] += py[::30][:2000]
    out = tmp_path / "dup.pt.trace.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    base = analyze(resolve(str(src))[0]).result
    got = analyze(resolve(str(out))[0]).result
    assert got.samples.duplicates == 2000 and base.samples.duplicates == 0
    assert got.samples.samples == base.samples.samples
    assert {k: v.ms_per_request for k, v in got.samples.stages.items()} == {
        k: v.ms_per_request for k, v in base.samples.stages.items()}
    assert any("2,000 python_function events repeat another exactly" in w for w in got.warnings)


@pytest.mark.parametrize("cat", ["kernel", "gpu_memcpy"])
def test_a_gpu_record_of_absurd_length_in_a_torch_trace_is_said_and_left_out(tmp_path, monkeypatch, cat):
    """kineto-demo-pr (1.02 s of host events) with one kernel or copy lasting 1e9 µs: the session
    is the host's and the profiler's span, so the record lies outside it, is said and is left out
    of GPU busy time (before, it stretched the session and made GPU busy 29.9% where it is 3.2%)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = DATA / "kineto-demo-pr.pt.trace.json.xz"
    doc = json.load(lzma.open(src, "rt"))
    gpu = [e for e in doc["traceEvents"] if e.get("cat") == cat]
    victim = gpu[len(gpu) // 2]
    victim["dur"] = 1e9
    out = tmp_path / "absurd.pt.trace.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    base = analyze(resolve(str(src))[0]).result
    got = analyze(resolve(str(out))[0]).result
    assert any("1 GPU activity records lie outside the capture session" in w for w in got.warnings)
    was, now = base.overlap.gpu_busy_fraction_of_batch_spans, got.overlap.gpu_busy_fraction_of_batch_spans
    assert was == pytest.approx(0.0321, abs=5e-5)
    assert now <= was and now == pytest.approx(was, abs=1e-4)        # less only the one record's own time
    assert got.capture.duration_s == base.capture.duration_s == pytest.approx(1.02, abs=0.01)


def test_stage_ranges_crossing_their_batch_are_said(journey, tmp_path):
    """gpu25-journey with 3 `head` ranges made to end 1 ms after their batch range (one stretched
    over the next batch's start) and 2 `parse` ranges made to start 1 ms before theirs: 5 stage
    ranges cross a batch range of their thread, said in a warning that --strict fails on."""
    heads = sql(journey, f"""SELECT e.rowid, b."end" FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
        JOIN NVTX_EVENTS b ON b.globalTid = e.globalTid AND b.eventType = 59 AND b.start <= e.start
             AND e."end" <= b."end" AND b.rowid != e.rowid
        LEFT JOIN StringIds bs ON bs.id = b.textId
        WHERE e.eventType = 59 AND {NAME} = 'head' AND COALESCE(b.text, bs.value) LIKE 'pooler %'""")
    parses = sql(journey, f"""SELECT e.rowid, b.start FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
        JOIN NVTX_EVENTS b ON b.globalTid = e.globalTid AND b.eventType = 59 AND b.start <= e.start
             AND e."end" <= b."end" AND b.rowid != e.rowid
        LEFT JOIN StringIds bs ON bs.id = b.textId
        WHERE e.eventType = 59 AND {NAME} = 'parse' AND COALESCE(b.text, bs.value) LIKE 'pooler %'""")
    assert len(heads) > 20 and len(parses) > 20
    edits = [('UPDATE NVTX_EVENTS SET "end" = ? WHERE rowid = ?', (end + 1_000_000, rid)) for rid, end in heads[10:13]]
    edits += [("UPDATE NVTX_EVENTS SET start = ? WHERE rowid = ?", (start - 1_000_000, rid))
              for rid, start in parses[15:17]]
    bad = edited_copy(journey, tmp_path / "crossing.sqlite", *edits)
    base = analyze(str(journey)).result
    got = analyze(str(bad)).result
    assert not any("cross a 'pooler' range" in w for w in base.warnings)
    assert any(w.startswith("5 stage ranges cross a 'pooler' range of their thread") for w in got.warnings)
    r = _cli("analyze", str(bad), "--strict")
    assert r.returncode == EXIT_STRICT, r.stderr
