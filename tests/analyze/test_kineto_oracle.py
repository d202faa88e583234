"""Every row of a Kineto trace's conversion (clef_prof.analyze.kineto.to_export) against a reading
of the trace by hand: json.load (decimals as Decimal, so microseconds become ns exactly) of the
real traces in tests/data, each event of interest turned into the row the nsys schema has for it
by the rules written out here (docs/kineto.md: user_annotation -> NVTX range, `enqueued rid=` ->
mark, cuda_runtime/cuda_driver -> API call, kernel/gpu_memcpy/gpu_memset -> GPU records with the
copy's kind from its name, python_function -> CLEF_PYTHON_FUNCTIONS), compared with the SQLite
file read by plain SQL.

kineto-bert-pair: bertsrv under torch.profiler on the H200 (runtime and driver calls, kernels,
pageable and pinned copies both ways, memsets); kineto-journey-pr: the journey demo (request
ranges and `enqueued` marks); kineto-bert-stack: with_stack=True (75,574 python_function events)."""
from __future__ import annotations

import json
import lzma
import re
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from clef_prof.analyze import kineto

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = ("kineto-bert-pair", "kineto-journey-pr", "kineto-bert-stack")
KIND = {"HtoD": 1, "DtoH": 2}
MEM = {"Pageable": 0, "Pinned": 1, "Device": 2}


def _ns(v) -> int:
    return int((Decimal(v) * 1000).to_integral_value())


def _gt(pid: int, tid: int) -> int:
    return ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def oracle(doc: dict) -> dict:
    """The tables by hand, as multisets of rows (names as text)."""
    ev = doc["traceEvents"]
    cats = {"user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "python_function"}
    x = [e for e in ev if e.get("ph") == "X" and e.get("cat") in cats]
    t0 = min(_ns(e["ts"]) for e in x)

    def span(e):
        a = _ns(e["ts"]) - t0
        return a, a + _ns(e["dur"])

    nvtx, marks = Counter(), Counter()
    for e in x:
        if e["cat"] == "user_annotation":
            a, b = span(e)
            if e["name"].startswith("enqueued rid="):
                marks[(a, None, 34, e["name"], _gt(e["pid"], e["tid"]))] += 1
            else:
                nvtx[(a, b, 59, e["name"], _gt(e["pid"], e["tid"]))] += 1
    flow = {(e["pid"], e["tid"], _ns(e["ts"])): e["id"] for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    flow_f = {(e["pid"], e["tid"], _ns(e["ts"])): e["id"] for e in ev if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    runtime = Counter()
    host = set()
    for e in x:
        if e["cat"] in ("cuda_runtime", "cuda_driver"):
            a, b = span(e)
            corr = e["args"].get("correlation", flow.get((e["pid"], e["tid"], _ns(e["ts"]))))
            runtime[(a, b, _gt(e["pid"], e["tid"]), corr, e["name"])] += 1
            host.add(e["pid"])
    gpid = (host.pop() & 0xFFFFFF) << 24 if len(host) == 1 else 0
    kernel, memcpy, memset = Counter(), Counter(), Counter()
    for e in x:
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            a, b = span(e)
            args = e["args"]
            corr = args.get("correlation", flow_f.get((e["pid"], e["tid"], _ns(e["ts"]))))
            base = (a, b, args.get("device", e["pid"]), args.get("stream", e["tid"]), corr, gpid)
            if e["cat"] == "kernel":
                kernel[base + (e["name"], e["name"], args.get("graph node id"))] += 1
            elif e["cat"] == "gpu_memcpy":
                m = re.fullmatch(r"Memcpy (\w+) \((\w+) -> (\w+)\)", e["name"])
                memcpy[base + (args["bytes"], KIND[m.group(1)], MEM[m.group(2)], MEM[m.group(3)])] += 1
            else:
                memset[base + (args["bytes"],)] += 1
    py = Counter()
    for e in x:
        if e["cat"] == "python_function":
            a, b = span(e)
            name = re.sub(r" at 0x[0-9a-fA-F]+>$", ">", e["name"])
            py[(a, b, _gt(e["pid"], e["tid"]), name, e["args"]["Python id"], e["args"]["Python parent id"])] += 1
    threads = {_gt(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M"
               and e.get("name") == "thread_name"}
    procs = {((e["pid"] & 0xFFFFFF) << 24, e["pid"], e["args"]["name"]) for e in ev if e.get("ph") == "M"
             and e.get("name") == "process_name"}
    ends = [k[1] for k in list(nvtx) + list(runtime) + list(kernel) + list(memcpy) + list(memset)] + [k[0] for k in marks]
    return dict(nvtx=nvtx, marks=marks, runtime=runtime, kernel=kernel, memcpy=memcpy, memset=memset, py=py,
                threads=threads, procs=procs, duration=max(ends) + 1, events=len(ev),
                driver=doc.get("cuda_driver_version"))


@pytest.mark.parametrize("name", TRACES)
def test_conversion_row_by_row_against_a_reading_by_hand(tmp_path, monkeypatch, name):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    raw = lzma.decompress((DATA / f"{name}.pt.trace.json.xz").read_bytes())
    path = tmp_path / f"{name}.pt.trace.json"
    path.write_bytes(raw)
    want = oracle(json.loads(raw, parse_float=Decimal))
    out = kineto.to_export(str(path), quiet=True)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        q = lambda s: con.execute(s).fetchall()      # noqa: E731
        s = dict(q("SELECT id, value FROM StringIds"))
        assert len(set(s.values())) == len(s)
        assert Counter(q('SELECT start, "end", eventType, text, globalTid FROM NVTX_EVENTS WHERE eventType = 59')) \
            == want["nvtx"]
        assert Counter(q('SELECT start, "end", eventType, text, globalTid FROM NVTX_EVENTS WHERE eventType = 34')) \
            == want["marks"]
        assert q("SELECT count(*) FROM NVTX_EVENTS")[0][0] == sum(want["nvtx"].values()) + sum(want["marks"].values())
        assert Counter((a, b, g, c, s[n]) for a, b, g, c, n in q(
            'SELECT start, "end", globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME')) == want["runtime"]
        assert Counter((*r[:6], s[r[6]], s[r[7]], r[8]) for r in q(
            "SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")) == want["kernel"]
        assert Counter(q("SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY")) == want["memcpy"]
        assert Counter(q("SELECT * FROM CUPTI_ACTIVITY_KIND_MEMSET")) == want["memset"]
        if want["py"]:
            assert Counter((a, b, g, s[n], p & 0xFFFFFFFFFF, None if par is None else par & 0xFFFFFFFFFF)
                           for a, b, g, n, p, par in q("SELECT * FROM CLEF_PYTHON_FUNCTIONS")) == want["py"]
        else:
            assert not q("SELECT name FROM sqlite_master WHERE name = 'CLEF_PYTHON_FUNCTIONS'")
        assert {g: s[n] for n, _, g in q("SELECT * FROM ThreadNames")} == want["threads"]
        assert set(q("SELECT * FROM PROCESSES")) == want["procs"]
        assert q("SELECT duration FROM ANALYSIS_DETAILS") == [(want["duration"],)]
        assert q("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'") == [(str(want["driver"]),)]
        assert dict(q("SELECT * FROM META_DATA_CAPTURE")) == {"COLLECT_CUDA_TRACE": "true", "COLLECT_NVTX_TRACE": "true"}
        meta = dict(q("SELECT * FROM META_DATA_EXPORT"))
        facts = json.loads(meta["CLEF_SOURCE_FACTS"])
        assert (meta["CLEF_SOURCE"], meta["CLEF_SOURCE_PATH"]) == ("kineto", str(path.resolve()))
        assert facts["files"] == 1 and facts["file_names"] == [path.name] and facts["events"] == want["events"]
        assert facts["python_functions"] == sum(want["py"].values())
        assert facts["time_precision"] == "1 ns (decimal microseconds)"
    finally:
        con.close()
    assert sum(want["nvtx"].values()) > 0 and sum(want["runtime"].values()) > 0
