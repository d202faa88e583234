"""`clef-prof export --chrome-trace` on the GPU recording: the Trace Event format's rules, and the
trace's content against the capture's own rows."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from clef_prof.analyze.figures import journey as jn
from clef_prof.analyze.pipeline import analyze
from conftest import ROOT
from trace_rules import violations

NAME = "gpu25-journey"


def _export(capture, tmp_path, *args):
    out = tmp_path / "trace.json"
    p = subprocess.run([sys.executable, "-m", "clef_prof", "export", "--chrome-trace", str(out), *args,
                        str(capture(NAME))], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return p, out


def test_p50_and_tail(capture, tmp_path):
    p, out = _export(capture, tmp_path, "--requests", "p50,p99")
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert violations(doc) == []
    a = analyze(str(capture(NAME)))
    t = a.journeys
    pick = jn.select(t, "p50,p99")
    assert len(pick) == 1 + a.result.journey.tail_requests == 24
    ev = doc["traceEvents"]
    reqs = [e for e in ev if e["ph"] == "B" and e["cat"] == "request"]
    assert sorted(e["args"]["rid"] for e in reqs) == sorted(str(r) for r in t["rid"][pick])
    # one flow per request, from its lane to the batch range holding its id
    s = {e["id"]: e for e in ev if e["ph"] == "s"}
    f = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert set(s) == set(f) and len(s) == len(pick)
    batches = {(e["pid"], e["tid"], e["ts"]): e for e in ev if e["ph"] == "B" and e.get("cat") == "batch"}
    for fid, end in f.items():
        assert (end["pid"], end["tid"], end["ts"]) in batches
    # the segments of each request on its lane sum to its end-to-end span (µs, 3 decimals)
    for e in reqs:
        segs = [x for x in ev if x["ph"] == "X" and x.get("cat") == "segment" and x["tid"] == e["tid"]
                and e["ts"] <= x["ts"] <= e["ts"] + e["args"]["e2e_ns"] / 1000]
        assert sum(x["args"]["ns"] for x in segs) == e["args"]["e2e_ns"] - e["args"]["unattributed_ns"]
    # the GPU work launched in the selected batches: as many kernels as SQL finds launched by calls
    # inside those batch ranges (on the batch's thread)
    gpu = [e for e in ev if e.get("cat") == "gpu"]
    assert all(e["dur"] >= 0 for e in gpu)
    assert {e["args"]["batch"] for e in gpu} == {int(b) for b in t["batch"][pick]}
    con = sqlite3.connect(f"file:{capture(NAME)}?mode=ro", uri=True)
    b = a.stages.batches
    want = 0
    for i in {int(x) for x in t["batch"][pick]}:
        want += con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId WHERE r.globalTid = ? AND r.start >= ? AND r.\"end\" <= ?",
            (int(b["gtid"][i]), int(b["start"][i]), int(b["end"][i]))).fetchone()[0]
    con.close()
    assert want > 0 and sum(e["name"].startswith("kernel") for e in gpu) == want


def test_all_requests_hold_the_rules(capture, tmp_path):
    p, out = _export(capture, tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert violations(doc) == []
    assert doc["otherData"]["requests"] == 2225


def test_rules_catch_broken_traces():
    """The checker is not vacuous: each rule fires on a trace that breaks it."""
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}}]
    bad = {"traceEvents": meta + [{"ph": "B", "pid": 1, "tid": 1, "ts": 0}, {"ph": "X", "pid": 1, "tid": 1, "ts": 5,
                                                                           "dur": -1},
                                  {"ph": "Q", "pid": 1, "tid": 1, "ts": 1}, {"ph": "s", "id": 7, "pid": 1, "tid": 1,
                                                                             "ts": 2},
                                  {"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 5},
                                  {"ph": "X", "pid": 1, "tid": 1, "ts": 1, "dur": 5},
                                  {"ph": "X", "pid": 1, "tid": 1, "ts": 3, "dur": 5}]}
    v = "\n".join(violations(bad))
    for needle in ("B without E", "bad duration", "unknown ph 'Q'", "not one s and one f", "(1, 2) has no thread_name",
                   "overlap without nesting"):
        assert needle in v, needle


@pytest.mark.parametrize("args, says", [(("--requests", "nosuch"), "no request range has the id nosuch"),
                                         ((), None)])
def test_bad_input_is_one_line(capture, tmp_path, args, says):
    if says is None:     # a capture without request ranges
        p = subprocess.run([sys.executable, "-m", "clef_prof", "export", "--chrome-trace", str(tmp_path / "x.json"),
                            str(capture("gpu25-q1c16-pr"))], cwd=ROOT, capture_output=True, text=True, timeout=300)
        says = "no request ranges"
    else:
        p, _ = _export(capture, tmp_path, *args)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("clef-prof: error")]
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "trace.json").exists()


def test_same_path_for_both_outputs_is_one_line(capture, tmp_path):
    """--chrome-trace and --csv naming one file (through another spelling of its path too) is
    refused before anything is read or written: the second output would replace the first."""
    (tmp_path / "sub").mkdir()
    p = subprocess.run([sys.executable, "-m", "clef_prof", "export", "--chrome-trace", str(tmp_path / "out"),
                        "--csv", str(tmp_path / "sub" / ".." / "out"), str(capture(NAME))],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(lines) == 1 and "name the same file" in lines[0], p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["sub"]


def test_a_failed_export_leaves_neither_output(capture, tmp_path):
    """The CSV used to be written before the Chrome trace's --requests was judged: a bad
    selection left out.csv behind. Both are now written together at the end, or neither."""
    p, _ = _export(capture, tmp_path, "--requests", "nosuch", "--csv", str(tmp_path / "out.csv"))
    assert p.returncode == 1 and "no request range has the id nosuch" in p.stderr, p.stderr
    assert list(tmp_path.iterdir()) == []
    p, out = _export(capture, tmp_path, "--requests", "p50", "--csv", str(tmp_path / "out.csv"))
    assert p.returncode == 0, p.stderr
    rows = (tmp_path / "out.csv").read_text().splitlines()
    assert len(rows) - 1 == len(analyze(str(capture(NAME))).journeys) == 2225
    assert len([e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "request"]) == 1
    assert sorted(f.name for f in tmp_path.iterdir()) == ["out.csv", "trace.json"]
