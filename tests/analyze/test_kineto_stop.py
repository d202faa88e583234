"""#35 B3: a batch range cut by the torch profiler's stop (its end is the trace's last timestamp, its
later stages missing) is counted cut, as nsys' ranges open at the capture's end are.

The trace: the real kineto-demo-main trace (torch 2.11, demo server: 15 kernel launches per request
and one D2H copy per batch by design, truth JSON), stopped in a copy in the middle of a batch, as
the profiler stops: every event from the stop on left out, every event still open closed at it.
The figures are held against hand counts over the copy (json.load)."""
from __future__ import annotations

import json
import lzma
import re
from decimal import Decimal

import pytest

from clef_prof.analyze.read.kineto import to_export
from clef_prof.analyze.pipeline import analyze
from conftest import DATA


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _analyze(trace):
    return analyze(to_export(str(trace), quiet=True)).result

STAGES = ("parse", "index", "transfer", "head", "encode")


def _load(name):
    with lzma.open(DATA / f"{name}.pt.trace.json.xz", "rt") as fh:
        return json.load(fh, parse_float=Decimal)


def _dump(doc, path):
    """The trace written with its decimal timestamps as they were (no float rounding)."""
    def exact(v):
        if isinstance(v, Decimal):
            return f"@@{v}@@"
        if isinstance(v, dict):
            return {k: exact(x) for k, x in v.items()}
        if isinstance(v, list):
            return [exact(x) for x in v]
        return v
    path.write_text(re.sub(r'"@@([^"@]*)@@"', r"\1", json.dumps(exact(doc))))
    return path


def _end(e):
    return Decimal(e["ts"]) + Decimal(e.get("dur", 0))


def stopped_at(doc, t):
    """The trace as a profiler stopped at `t` writes it."""
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "M" and "ts" in e and Decimal(e["ts"]) >= t:
            continue
        if e.get("ph") == "X" and "dur" in e and _end(e) > t:
            e = {**e, "dur": t - Decimal(e["ts"])}
        out.append(e)
    return {**doc, "traceEvents": out}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, truth):
    doc = _load("kineto-demo-main")
    ua = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    batches = sorted((e for e in ua if e["name"].startswith("pooler ")), key=lambda e: Decimal(e["ts"]))
    cut = batches[30]
    inside = sorted((e for e in ua if e["name"] in STAGES and e["tid"] == cut["tid"]
                     and Decimal(e["ts"]) >= Decimal(cut["ts"]) and _end(e) <= _end(cut)),
                    key=lambda e: Decimal(e["ts"]))
    assert [e["name"] for e in inside] == list(STAGES)
    t = _end(inside[1])                      # stopped as `index` ends: transfer, head, encode missing
    trace = _dump(stopped_at(doc, t), tmp_path_factory.mktemp("stop") / "stopped.pt.trace.json")
    return trace, {"complete": sum(_end(b) < t for b in batches), "open_stages": 2,
                   "requests": sum(int(re.search(r"n=(\d+)", b["name"]).group(1)) for b in batches if _end(b) < t)}


def test_a_batch_cut_by_the_stop_is_cut(stopped, truth):
    path, hand = stopped
    assert hand["complete"] == 30
    r = _analyze(path)
    assert r.batches == hand["complete"]
    assert r.requests == hand["requests"]
    # the batch, and the stages of it that began before the stop (`parse` ended, `index` ends at it)
    assert r.excluded.cut_at_edges.get("pooler") == 1
    assert sum(r.excluded.cut_at_edges.get(s, 0) for s in STAGES) == hand["open_stages"]
    assert any("3 ranges cut at the capture edges" in w for w in r.warnings), r.warnings
    design = truth("kineto-demo-main")
    assert r.per_request.kernel_launches == design["design_per_request"]["kernel_launches"] == 15
    assert r.pooler.cuda.d2h_copies / r.batches == design["design_per_batch"]["d2h_copies"] == 1
    assert r.stages["encode"].instances == r.stages["head"].instances == hand["complete"]


def test_the_uncut_trace_keeps_every_batch(truth, tmp_path):
    path = tmp_path / "main.pt.trace.json"
    path.write_bytes(lzma.decompress((DATA / "kineto-demo-main.pt.trace.json.xz").read_bytes()))
    r = _analyze(path)
    assert r.batches == truth("kineto-demo-main")["server_counts"]["batches"] == 57
    assert not r.excluded.cut_at_edges.get("pooler")
