"""Per-request journeys from PyTorch profiler (Kineto) traces.

The real traces of tests/data (the demo server under `clef-prof record --profiler torch` on an
H200) hold batch and stage ranges but no request ranges: they were recorded before request ranges
were emitted under torch. So the journey test edits a copy of the real pr trace: for each id its
batch ranges name, it adds what clef_prof.request and clef_prof.enqueued emit under torch
(`user_annotation` X events `request rid=ID` and `enqueued rid=ID`, the latter of about zero
duration), on one thread per request as the demo server's HTTP threads, with times derived from the
batch's own ts and dur (a seeded draw of the gaps), plus an `encode` range after the batch for some
requests, some without an enqueue, one batch id no request takes and one request no batch names.
Every segment of every journey is then held against a by-hand computation from the edited JSON
(json.load with exact decimals and plain Python, written from docs/journey.md; no clef_prof code).
"""
from __future__ import annotations

import gzip
import json
import lzma
import random
import re
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze

DATA = Path(__file__).resolve().parents[1] / "data"
SEGMENTS = ("receive", "queue", "batch", "after_batch", "encode", "send", "unattributed")
HTTP_TID = 700000           # the added request threads: HTTP_TID + request index (no real thread has these)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(name: str, pid: int, tid: int, ts: int, dur: int) -> str:
    return json.dumps({"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid,
                       "ts": "TS", "dur": "DUR", "args": {}}).replace('"TS"', _us(ts)).replace('"DUR"', _us(dur))


def _edited_trace(out: Path, seed: int = 22) -> dict:
    """The real pr trace with request and enqueue events added (written to `out`, gzip'd); what was
    added, for the record."""
    text = lzma.open(DATA / "kineto-demo-pr.pt.trace.json.xz", "rt").read()
    doc = json.loads(text, parse_float=Decimal)
    batches = sorted((e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"
                      and e["name"].startswith("pooler ")), key=lambda e: e["ts"])
    rng = random.Random(seed)
    added, n = [], 0
    facts = {"requests": 0, "marks": 0, "encodes": 0, "no_mark": 0, "skipped": None}
    for bi, b in enumerate(batches):
        b0, b1 = _ns(b["ts"]), _ns(b["ts"]) + _ns(b["dur"])
        pid = b["pid"]
        ids = re.search(r"rid=(\S+)", b["name"]).group(1).split(",")
        for k, rid in enumerate(ids):
            if bi == 2 and k == 0:
                facts["skipped"] = rid              # a batch id no request range takes
                continue
            tid = HTTP_TID + n
            n += 1
            r0 = b0 - rng.randint(40_000, 3_000_000)
            e = r0 + rng.randint(3_000, 30_000)
            if n % 5 == 0:                          # a front-end encode of its own after the batch
                c0 = b1 + rng.randint(5_000, 80_000)
                c1 = c0 + rng.randint(20_000, 400_000)
                r1 = c1 + rng.randint(1_000, 60_000)
                added.append(_x("encode", pid, tid, c0, c1 - c0))
                facts["encodes"] += 1
            else:
                r1 = b1 + rng.randint(1_000, 500_000)
            added.append(_x(f"request rid={rid}", pid, tid, r0, r1 - r0))
            facts["requests"] += 1
            if n % 17 == 0:
                facts["no_mark"] += 1
            else:
                added.append(_x(f"enqueued rid={rid}", pid, tid, e, rng.randint(0, 900)))
                facts["marks"] += 1
    # a request no batch names (rejected before the queue)
    lone = _ns(batches[10]["ts"])
    added.append(_x("request rid=r-lone", batches[0]["pid"], HTTP_TID + n, lone, 250_000))
    facts["requests"] += 1
    # a request still open when the profiler stopped, as torch may write it: no end, a negative dur
    last = _ns(batches[-1]["ts"])
    added.append(_x("request rid=r-open", batches[0]["pid"], HTTP_TID + n + 1, last, 0).replace(
        '"dur": 0.000', '"dur": -5288087054.908'))
    head = '"traceEvents":['
    at = text.index(head) + len(head)
    with gzip.open(out, "wt") as fh:
        fh.write(text[:at] + ",".join(added) + "," + text[at:])
    facts["batches"] = len(batches)
    return facts


def _oracle(path: Path) -> dict:
    """rid -> points and segments (ns), by hand from the JSON, after docs/journey.md."""
    doc = json.load(gzip.open(path, "rt"), parse_float=Decimal)
    ua = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]

    def span(e):
        return _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), (e["pid"], e["tid"])

    batches = [(*span(e), re.search(r"rid=(\S+)", e["name"]).group(1).split(","))
               for e in ua if e["name"].startswith("pooler ")]
    marks = [(_ns(e["ts"]), e["name"].split("rid=", 1)[1]) for e in ua if e["name"].startswith("enqueued rid=")]
    encodes = [span(e) for e in ua if e["name"] == "encode"]
    encodes = [c for c in encodes if not any(c[2] == b[2] and b[0] <= c[0] and c[1] <= b[1] for b in batches)]
    # the trace's last timestamp, where the profiler's stop closed the ranges still open (#35 B3:
    # kineto-journey-pr's 16 request ranges in flight, one per HTTP thread, all end there)
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("dur") is not None]
    final = max(_ns(e["ts"]) + _ns(e["dur"]) for e in xs) if any(e.get("cat") == "Trace" for e in xs) else None
    out = {}
    for e in ua:
        if not e["name"].startswith("request rid="):
            continue
        rid = e["name"].split("rid=", 1)[1]
        r0, r1, thread = span(e)
        if r1 < r0 or r1 == final:              # open at the profiler's stop: cut, in no figure
            out.setdefault("_cut", []).append(rid)
            continue
        bs = [b for b in batches if rid in b[3] and r0 <= b[0] <= r1]
        b = min(bs) if bs else None
        ms = [t for t, i in marks if i == rid and r0 <= t <= r1]
        m = min(ms) if ms else None
        floor = b[1] if b else (m if m is not None else r0)
        cs = [c for c in encodes if c[2] == thread and c[1] <= r1]
        c = max(cs, key=lambda c: c[1]) if cs else None
        c = c if c is not None and c[0] >= floor else None
        seg = dict.fromkeys(SEGMENTS, 0)
        if m is not None:
            seg["receive"] = m - r0
            if b:
                seg["queue"] = b[0] - m
        if b:
            seg["batch"] = b[1] - b[0]
            seg["send"] = r1 - b[1]
        if c:
            seg["encode"] = c[1] - c[0]
            seg["send"] = r1 - c[1]
            if b:
                seg["after_batch"] = c[0] - b[1]
        seg["unattributed"] = (r1 - r0) - sum(seg.values())
        out[rid] = {"e2e": r1 - r0, "batch_ns": b[1] - b[0] if b else None, "has_mark": m is not None,
                    "has_encode": c is not None, "size": len(b[3]) if b else 0, **seg}
    out["_claims"] = sum(len(b[3]) for b in batches)
    return out


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    d = tmp_path_factory.mktemp("kineto-journey")
    path = d / "demo-pr-requests.pt.trace.json.gz"
    facts = _edited_trace(path)
    path.chmod(0o444)
    return path, facts


def test_enqueue_events_become_marks_and_requests_ranges(edited, tmp_path, monkeypatch):
    """The converted export: one eventType-34 row with a NULL end per `enqueued` event, at its ts;
    request ranges as push/pop ranges with their ends (SQL over the conversion)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    path, facts = edited
    db = sqlite3.connect(resolve(str(path))[0])
    marks = db.execute("SELECT count(*), sum(\"end\" IS NULL), sum(text GLOB 'enqueued rid=*') FROM NVTX_EVENTS "
                       "WHERE eventType = 34").fetchone()
    assert marks == (facts["marks"], facts["marks"], facts["marks"])
    assert db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text GLOB 'enqueued*' AND eventType != 34").fetchone() \
        == (0,)
    reqs = db.execute("SELECT count(*), sum(\"end\" > start) FROM NVTX_EVENTS WHERE eventType = 59 "
                      "AND text GLOB 'request rid=*'").fetchone()
    assert reqs == (facts["requests"] + 1, facts["requests"])      # r-open: its negative dur kept
    # a mark's time is its event's start: the first request's mark lies inside its request range
    first = db.execute("SELECT m.start - r.start, r.\"end\" - m.start FROM NVTX_EVENTS m JOIN NVTX_EVENTS r "
                       "ON r.eventType = 59 AND r.text = 'request rid=' || substr(m.text, 14) "
                       "WHERE m.eventType = 34 ORDER BY m.start LIMIT 1").fetchone()
    assert 3_000 <= first[0] <= 30_000 and first[1] > 0


def test_every_segment_of_every_journey_matches_the_json(edited):
    path, facts = edited
    a = analyze(resolve(str(path))[0])
    oracle = _oracle(path)
    t = a.journeys
    j = a.result.journey
    assert t is not None and len(t) == facts["requests"] + 1 == len(oracle) - 2 + len(oracle["_cut"])
    seen = 0
    for i in range(len(t)):
        rid = str(t["rid"][i])
        if t["cut"][i]:
            assert rid in oracle["_cut"] and int(t["e2e_ns"][i]) == 0
            continue
        want = oracle[rid]
        got = {s: int(t[f"{s}_ns"][i]) for s in SEGMENTS}
        assert got == {s: want[s] for s in SEGMENTS}, (rid, got, want)
        assert sum(got.values()) == int(t["e2e_ns"][i]) == want["e2e"]
        assert int(t["batch_size"][i]) == want["size"]
        assert (int(t["enqueue"][i]) >= 0) == want["has_mark"]
        assert (int(t["encode_start"][i]) >= 0) == want["has_encode"]
        assert not t["cut"][i] and not t["out_of_order"][i]
        seen += 1
    assert seen == facts["requests"]
    # counts: every id of the server's 85 batches but the skipped one has its request; the lone
    # request has no batch; the encode segment is there exactly where one was added
    complete = [v for k, v in oracle.items() if not k.startswith("_") and v["batch_ns"] is not None]
    assert (j.request_ranges, j.complete, j.without_batch, j.cut_by_window) == (
        facts["requests"] + 1, len(complete), 1, 1)
    assert j.listed["cut_by_window"] == oracle["_cut"] == ["r-open"]
    assert j.batch_ids == oracle["_claims"] == 1149 and j.unclaimed_batch_ids == 1
    assert j.listed["unclaimed_batch_ids"] == [facts["skipped"]] and j.listed["without_batch"] == ["r-lone"]
    assert j.without_enqueue == sum(not v["has_mark"] for v in complete) == facts["no_mark"]
    assert j.without_encode == sum(not v["has_encode"] for v in complete) == len(complete) - facts["encodes"]
    assert a.result.requests == 1149 and a.result.batches == facts["batches"] == 85
    # the batch segment's mean over the complete journeys, by hand
    assert j.segments["batch"].mean_ms == pytest.approx(
        sum(v["batch_ns"] for v in complete) / len(complete) / 1e6, rel=1e-12)
    # the request threads carry no CUDA work: no "threads with no range" warning from the conversion
    assert not [w for w in a.result.warnings if "no user_annotation range" in w]


@pytest.mark.parametrize("variant", ["main", "pr"])
def test_real_traces_without_request_ranges_have_no_journey(variant, tmp_path):
    """The committed traces (recorded before request ranges were emitted under torch): no journey
    section, and no mark made up from their user annotations."""
    path = tmp_path / f"demo-{variant}.pt.trace.json.gz"
    with lzma.open(DATA / f"kineto-demo-{variant}.pt.trace.json.xz") as src, gzip.open(path, "wb") as dst:
        dst.write(src.read())
    a = analyze(resolve(str(path))[0])
    assert a.journeys is None and a.result.journey is None
    db = sqlite3.connect(resolve(str(path))[0])
    assert db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34").fetchone() == (0,)


def _as_kineto(export: Path, out: Path) -> int:
    """The `clef` domain's ranges and marks of an nsys export written as a Kineto trace, the way
    clef_prof emits them under torch: ranges as user_annotation X events, marks as X events of
    zero duration. Ranges still open at the capture's end (no end, or nsys' end at the session's
    end) are left out: a torch trace holds no range that did not close while it ran. Returns the
    number of events written."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    doms = {(d, p) for d, p in con.execute(
        "SELECT e.domainId, e.globalTid >> 24 FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType = 75 AND COALESCE(s.value, e.text) = 'clef'")}
    rows = con.execute("SELECT e.start, e.\"end\", e.eventType, e.globalTid, e.domainId, COALESCE(s.value, e.text) "
                       "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                       "WHERE e.eventType IN (34, 59, 60)").fetchall()
    session_end = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0]
    con.close()
    events = []
    for start, end, etype, gtid, did, text in rows:
        if (did, gtid >> 24) not in doms or text is None:
            continue
        if etype == 34:
            end = start
        elif end is None or end >= session_end:
            continue
        events.append(_x(text, (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF, start, end - start))
    with gzip.open(out, "wt") as fh:
        fh.write('{"schemaVersion":1,"traceEvents":[' + ",".join(events) + "]}")
    return len(events)


def test_journeys_equal_those_of_nsys_for_the_same_program(capture, tmp_path):
    """The demo server's nsys recording (tests/data/gpu25-journey) carried over into a Kineto trace
    as clef_prof emits it under torch: every complete journey, by id, has the same segments, batch
    and batch size as analyze finds in the nsys export; what differs is only what the formats
    differ in (the 16 ranges nsys keeps open at the capture's end are not in a torch trace)."""
    export = capture("gpu25-journey")
    trace = tmp_path / "gpu25-journey.pt.trace.json.gz"
    assert _as_kineto(export, trace) > 5_000          # 2,225 marks, 2,209 closed request ranges, batches, stages
    ns, kt = analyze(str(export)), analyze(resolve(str(trace))[0])
    jn, jk = ns.result.journey, kt.result.journey
    assert (jn.complete, jk.complete) == (2209, 2209)
    assert (jn.cut_by_window, jk.cut_by_window, jk.request_ranges) == (16, 0, 2209)
    assert jk.without_enqueue == jn.without_enqueue == 0 and jk.out_of_order == jn.out_of_order == 0

    def rows(a):
        t = a.journeys
        ok = ~t["cut"] & (t["batch"] >= 0)
        return {str(t["rid"][i]): tuple(int(t[f"{s}_ns"][i]) for s in SEGMENTS) + (int(t["batch_size"][i]),)
                for i in range(len(t)) if ok[i]}

    assert rows(kt) == rows(ns)
    for s in SEGMENTS:
        assert jk.segments[s].mean_ms == pytest.approx(jn.segments[s].mean_ms, rel=1e-12), s


def test_real_torch_recording_every_journey_matches_the_json(tmp_path):
    """A real recording (H200, torch 2.11, the demo server's request ranges on its 16 HTTP threads
    and enqueue events, profile_all_threads=True): every complete journey, segment by segment,
    equals the hand computation from the JSON, and the counts are the trace's and the server's."""
    truth = json.loads((DATA / "kineto-journey-pr.truth.json").read_text())
    path = tmp_path / "journey-pr.pt.trace.json.gz"
    with lzma.open(DATA / "kineto-journey-pr.pt.trace.json.xz") as src, gzip.open(path, "wb") as dst:
        dst.write(src.read())
    a = analyze(resolve(str(path))[0])
    oracle = _oracle(path)
    t, j = a.journeys, a.result.journey
    n = truth["trace_counts"]
    assert j.request_ranges == len(t) == n["request"]
    complete = 0
    cut = sorted(str(t["rid"][i]) for i in range(len(t)) if t["cut"][i])
    assert cut == sorted(oracle["_cut"]) and len(cut) == j.cut_by_window == 16     # one per HTTP thread
    for i in range(len(t)):
        if t["cut"][i]:
            continue
        want = oracle[str(t["rid"][i])]
        got = {s: int(t[f"{s}_ns"][i]) for s in SEGMENTS}
        assert got == {s: want[s] for s in SEGMENTS}
        assert sum(got.values()) == int(t["e2e_ns"][i]) == want["e2e"]
        complete += want["batch_ns"] is not None
    assert j.complete == complete and j.complete + j.without_batch + j.cut_by_window == n["request"]
    assert j.without_enqueue == 0
    # the batches are the server's own count of its window; their ids the batch messages' lists
    assert (a.result.requests, a.result.batches) == (truth["server_counts"]["requests"],
                                                     truth["server_counts"]["batches"]) == (812, 52)
    assert j.batch_ids == oracle["_claims"] == 812
    assert len({int(x) for x in t["gtid"]}) == n["request_threads"]
