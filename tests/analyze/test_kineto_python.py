"""A Kineto trace's python_function events (torch.profiler with_stack=True) as the per-stage
Python view (analyze.figures.samples.durations): self time per stage and stack, in ns, not samples.

The trace is CONSTRUCTED here (no torch on the CPU machines, and no shipped trace was recorded
with_stack): its events follow the real format, as torch's profiler writes them (`ph` "X", `cat`
"python_function", `name` "file.py(LINE): function" or a built-in's name, `args` "Python id",
"Python parent id" (null at a root), "Python thread"; torch/csrc/profiler's kPythonId /
kPythonParentId fields), with durations chosen so that every figure has a by-hand oracle."""
from __future__ import annotations

import json

import pytest

from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.samples import KINETO_SOURCE, OUTSIDE_SLOT
from clef_prof.analyze.figures.stages import StageConfig
from clef_prof.explore.html import render_html

PID = 4242
BATCHES, N = 4, 2            # 4 batches of 2 requests
US = 1000.0                  # one batch every ms (ts in microseconds)


def _trace() -> dict:
    """Per batch at t0 = b ms: serve() [0, 900] µs encloses pooler n=2 [50, 850] which holds
    head [100, 800]; in head: three() [120, 520] calling <built-in method sum> [200, 300], then
    one() [550, 650]; serve()'s own time outside them."""
    ev, pid = [], 0

    def fn(name, t0, dur, parent):
        nonlocal pid
        pid += 1
        ev.append({"ph": "X", "cat": "python_function", "name": name, "pid": PID, "tid": PID, "ts": t0, "dur": dur,
                   "args": {"Python parent id": parent, "Python id": pid, "Python thread": 0}})
        return pid

    for b in range(BATCHES):
        t = 1_000_000.0 + b * US
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"pooler n={N}", "pid": PID, "tid": PID,
                   "ts": t + 50, "dur": 800.0, "args": {}})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "head", "pid": PID, "tid": PID,
                   "ts": t + 100, "dur": 700.0, "args": {}})
        root = fn("srv.py(10): serve", t, 900.0, None)
        three = fn("srv.py(20): three", t + 120, 400.0, root)
        # the bound object's address differs per batch (per object, per process in a real trace)
        fn(f"<built-in method sum of PyCapsule object at 0x7f{b:02x}5419d300>", t + 200, 100.0, three)
        fn("srv.py(30): one", t + 550, 100.0, root)
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000, "traceEvents": ev}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = tmp_path_factory.mktemp("kpy") / "srv.pt.trace.json"
    path.write_text(json.dumps(_trace()))
    return analyze(resolve(str(path))[0], StageConfig(stages=("head",)))


def test_python_functions_per_stage_from_kineto_durations(result):
    s = result.result.samples
    assert s is not None and s.source == KINETO_SOURCE and s.unit == "ns"
    head = s.stages["head"]
    by = {f.function: f for f in head.top_self}
    # by hand: per batch three's self 300 µs, the built-in 100, one 100: 500 µs of head in functions
    assert head.samples == BATCHES * 500_000
    assert by["three"].self_samples == BATCHES * 300_000 and by["three"].file == "srv.py"
    # one function whatever the address (else compare would see a new function in every process)
    assert by["<built-in method sum of PyCapsule object>"].self_samples == BATCHES * 100_000
    assert not [f for f in head.top_self if "0x" in f.function]
    assert by["one"].self_samples == BATCHES * 100_000
    assert by["three"].self_share == pytest.approx(0.6)
    # durations are measured, not drawn: the interval is the point
    assert by["three"].self_share_low == by["three"].self_share_high == pytest.approx(0.6)
    assert by["three"].self_ms_per_request == pytest.approx(BATCHES * 0.300 / (BATCHES * N))
    incl = {f.function: f for f in head.top_inclusive}
    assert incl["three"].inclusive_samples == BATCHES * 400_000
    # serve() encloses the batch range: its self time (900 - 400 - 100 µs a batch) is outside every range
    out = s.stages[OUTSIDE_SLOT]
    assert out.samples == BATCHES * 400_000 and out.top_self[0].function == "serve"
    assert not head.few and s.ms_per_sample is None
    assert result.result.to_json()["samples"]["unit"] == "ns"


def test_kineto_icicle_says_ns(result):
    text = render_html(result)
    assert "Python functions per stage (sampled)" in text
    assert "three (srv.py): 1,600,000 ns (80.0% of head), self 1,200,000 ns (60.0%)" in text
    assert "2,000,000 ns" in text and "1,600,000 ns in no batch range" in text


def test_dominant_stage_finding_names_the_functions_by_time(result):
    f = next(f for f in result.result.findings if f.id == "dominant-stage")
    assert "by Python function self time (2.000 ms in the stage): three (srv.py) 60%" in f.summary
    assert "interval" not in f.summary.split("by Python")[1]


# ---------------------------------------------------------------- a real with_stack trace
# tests/programs/bertsrv (transformers' BertModel behind aiohttp) recorded on the H200 with
# `clef-prof record --profiler torch --torch-stack` (scripts/gpu-samples.sh, part ab, arm eager),
# cut to its first three batches: every event that starts before the fourth batch range and ends
# after the first range starts (events that overlap the cut kept whole).
BERT = "kineto-bert-stack.pt.trace.json.xz"
BERT_STAGES = ("parse", "transfer", "head", "encode")


def _bert_oracle(trace: dict) -> dict[str, dict[tuple[str, str], float]]:
    """{stage or "(batch)"/"(outside)": {(function, file): self µs}} by hand, one event at a time: self =
    duration less its children's (by Python parent id); the stage is the innermost stage range of
    its thread that holds the whole event, else a batch range that does, else "(outside)"."""
    import re
    ev = trace["traceEvents"]
    py = [e for e in ev if e.get("cat") == "python_function"]
    child = {}
    for e in py:
        p = e["args"].get("Python parent id")
        if p is not None:
            child[p] = child.get(p, 0.0) + e["dur"]
    ranges = [e for e in ev if e.get("cat") == "user_annotation"]
    out: dict[str, dict[tuple[str, str], float]] = {}
    for e in py:
        a, b = e["ts"], e["ts"] + e["dur"]
        holding = [r for r in ranges if r["tid"] == e["tid"] and r["pid"] == e["pid"] and r["ts"] <= a and b <= r["ts"] + r["dur"]]
        stages = [r for r in holding if r["name"] in BERT_STAGES]
        slot = (max(stages, key=lambda r: r["ts"])["name"] if stages else
                "(batch)" if any(r["name"].startswith("pooler") for r in holding) else "(outside)")
        m = re.match(r"(.*\.py)\(\d+\): (.*)", e["name"])     # `file.py(LINE): function`, else a built-in's name
        name = (m.group(2), m.group(1)) if m else (re.sub(r" at 0x[0-9a-f]+>$", ">", e["name"]), "")
        out.setdefault(slot, {})
        out[slot][name] = out[slot].get(name, 0.0) + max(e["dur"] - child.get(e["args"]["Python id"], 0.0), 0.0)
    return out


def test_real_bert_trace_functions_per_stage_against_a_reading_by_hand(tmp_path):
    import lzma
    from pathlib import Path
    raw = lzma.decompress((Path(__file__).resolve().parents[1] / "data" / BERT).read_bytes())
    trace = json.loads(raw)
    path = tmp_path / "bert.pt.trace.json"
    path.write_bytes(raw)
    an = analyze(resolve(str(path))[0], StageConfig(stages=BERT_STAGES))
    s = an.result.samples
    assert s is not None and s.source == KINETO_SOURCE and s.unit == "ns"
    oracle = _bert_oracle(trace)
    for stage in BERT_STAGES:
        got = s.stages[stage]
        want = oracle.get(stage, {})
        assert got.samples == pytest.approx(1000 * sum(want.values()), rel=1e-6, abs=1000)
        for f in got.top_self:                   # every function shown, against the hand sum (µs -> ns)
            assert f.self_samples == pytest.approx(1000 * want[(f.function, f.file)], rel=1e-5, abs=100), (stage, f.function)
    # what the user reads: the head's time is in BertModel's forward and the torch built-ins it calls,
    # one name per built-in whatever object it was bound to
    head = {f.function for f in s.stages["head"].top_self}
    assert "<built-in function linear>" in head and "forward" in head
    assert not [f for st in s.stages.values() for f in st.top_self if " at 0x" in f.function]


def test_real_bert_trace_finding_names_the_stages_top_three_functions(tmp_path):
    """The finding that blames a stage names its top three functions by self time, in order, as
    the per-stage table ranks them (the hand reading above holds the table)."""
    import lzma
    from pathlib import Path
    path = tmp_path / "bert.pt.trace.json"
    path.write_bytes(lzma.decompress((Path(__file__).resolve().parents[1] / "data" / BERT).read_bytes()))
    r = analyze(resolve(str(path))[0], StageConfig(stages=BERT_STAGES)).result
    f = next(f for f in r.findings if f.id in ("dominant-stage", "host-bound") and f.evidence.get("top_functions"))
    stage = f.evidence.get("dominant_stage") or f.stage
    table = r.samples.stages[stage].top_self
    assert len(table) > 3
    assert [(t["function"], t["file"]) for t in f.evidence["top_functions"]] == [(x.function, x.file) for x in table[:3]]
    said = f.summary.split("by Python function self time", 1)[1]
    labels = [f"{x.function} ({x.file.rsplit('/', 1)[-1]})" if x.file else x.function for x in table[:4]]
    at = [said.find(label + " ") for label in labels]
    assert 0 <= at[0] < at[1] < at[2] and at[3] < 0, (labels, said)


def test_real_bert_trace_function_rows_of_compare_are_each_stages_top_five(tmp_path):
    """compare's function rows per stage: each arm's five functions of most self time (the hand
    reading above), ordered by self ms per request; the trace against itself changes nothing."""
    import lzma
    from pathlib import Path

    from clef_prof.compare import engine as comparison
    from clef_prof.compare.arm import collect
    raw = lzma.decompress((Path(__file__).resolve().parents[1] / "data" / BERT).read_bytes())
    path = tmp_path / "bert.pt.trace.json"
    path.write_bytes(raw)
    cfg = StageConfig(stages=BERT_STAGES)
    arms = collect([], [f"main={path}", f"pr={path}"])
    comp = comparison.compare(arms, comparison.load_all(arms, cfg, jobs=1), cfg)
    oracle = _bert_oracle(json.loads(raw))
    requests = analyze(resolve(str(path))[0], cfg).result.requests
    for stage in BERT_STAGES:
        want = oracle.get(stage, {})
        rows = comp["functions"]["stages"].get(stage, {}).get("functions", [])
        top = sorted(want, key=lambda k: -want[k])[:5]
        assert len(want) <= 5 or len(rows) == 5, stage
        assert {(r["function"], r["file"]) for r in rows} == set(top), stage
        for r in rows:
            ms = want[(r["function"], r["file"])] / 1000 / requests
            assert r["arms"]["main"]["self_ms_per_request"] == pytest.approx(ms, rel=1e-5, abs=1e-7)
            assert r["change"] == 0
        ms = [r["arms"]["main"]["self_ms_per_request"] for r in rows]
        assert ms == sorted(ms, reverse=True)
    assert sum(len(oracle.get(s, {})) > 5 for s in BERT_STAGES) >= 2
