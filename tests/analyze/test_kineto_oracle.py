"""Every row of a Kineto trace's conversion (clef_prof.analyze.read.kineto.to_export) against a reading
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
import os
import re
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from clef_prof.analyze.read import kineto

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = ("kineto-bert-pair", "kineto-journey-pr", "kineto-bert-stack")
KIND = {"HtoD": 1, "DtoH": 2}
MEM = {"Pageable": 0, "Pinned": 1, "Device": 2}
GPU = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset", "Kernel": "kernel",
       "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}      # the last three: older traces' categories


def _ns(v) -> int:
    return int((Decimal(v) * 1000).to_integral_value())


def _gt(pid: int, tid: int) -> int:
    return ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def oracle(doc: dict, kinds: dict = KIND, mems: dict = MEM) -> dict:
    """The tables by hand, as multisets of rows (names as text), and the warnings' figures.
    `kinds`, `mems`: the copy kind and memory kind names -> nsys' enum values."""
    ev = doc["traceEvents"]
    cats = {"user_annotation", "cuda_runtime", "cuda_driver", "python_function", *GPU}
    x = [e for e in ev if e.get("ph") == "X" and isinstance(e.get("cat"), str) and e.get("cat") in cats]
    no_ts = sum(1 for e in x if e.get("ts") is None)
    no_dur = sum(1 for e in x if e.get("ts") is not None and e.get("dur") is None)
    x = [e for e in x if e.get("ts") is not None and e.get("dur") is not None]
    no_thread = sum(1 for e in x if e["cat"] in ("user_annotation", "cuda_runtime", "cuda_driver")
                    and not (type(e.get("pid")) is int and type(e.get("tid")) is int
                             and isinstance(e.get("name"), str) and e["name"]))
    t0 = min(_ns(e["ts"]) for e in x)

    def span(e):
        a = _ns(e["ts"]) - t0
        return a, a + _ns(e["dur"])

    # a trace with the profiler's own span ("PyTorch Profiler (0)", cat Trace) stopped at its last
    # timestamp: a range ending there was open at the stop, and is written open (no end)
    spans = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "Trace" and e.get("dur") is not None]
    final = max([span(e)[1] for e in x + spans]) if spans else None
    nvtx, marks = Counter(), Counter()
    for e in x:
        if e["cat"] == "user_annotation" and e.get("pid") is not None and e.get("tid") is not None:
            a, b = span(e)
            if e["name"].startswith("enqueued rid="):
                marks[(a, None, 34, e["name"], _gt(e["pid"], e["tid"]))] += 1
            else:
                nvtx[(a, None if final is not None and b >= final and b > a else b, 59, e["name"],
                      _gt(e["pid"], e["tid"]))] += 1
    flow = {(e["pid"], e["tid"], _ns(e["ts"])): e["id"] for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    flow_f = {(e["pid"], e["tid"], _ns(e["ts"])): e["id"] for e in ev if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    runtime = Counter()
    host = set()
    pairs = Counter()
    for e in x:
        if e["cat"] in ("cuda_runtime", "cuda_driver") and e.get("pid") is not None and e.get("tid") is not None:
            a, b = span(e)
            corr = e.get("args", {}).get("correlation", flow.get((e["pid"], e["tid"], _ns(e["ts"]))))
            runtime[(a, b, _gt(e["pid"], e["tid"]), corr, e["name"])] += 1
            host.add(e["pid"])
            if corr is not None:
                pairs[(e["pid"], corr)] += 1
    gpid = (host.pop() & 0xFFFFFF) << 24 if len(host) == 1 else 0
    kernel, memcpy, memset = Counter(), Counter(), Counter()
    unknown = 0
    for e in x:
        if e["cat"] in GPU:
            a, b = span(e)
            args = e.get("args", {})
            corr = args.get("correlation", flow_f.get((e.get("pid"), e.get("tid"), _ns(e["ts"]))))
            base = (a, b, args.get("device", e.get("pid")), args.get("stream", e.get("tid")), corr, gpid)
            if GPU[e["cat"]] == "kernel":
                kernel[base + (e["name"], e["name"], args.get("graph node id"))] += 1
            elif GPU[e["cat"]] == "gpu_memcpy":
                m = re.fullmatch(r"Memcpy (\w+) \(([\w ]+) -> ([\w ]+)\)", e["name"])
                unknown += m is None
                kind, src, dst = (kinds.get(m.group(1), 0), mems.get(m.group(2), 7), mems.get(m.group(3), 7)) if m \
                    else (0, 7, 7)
                memcpy[base + (args.get("bytes"), kind, src, dst)] += 1
            else:
                memset[base + (args.get("bytes"),)] += 1
    py = Counter()
    for e in x:
        if e["cat"] == "python_function" and e.get("pid") is not None and e.get("tid") is not None:
            a, b = span(e)
            name = re.sub(r" at 0x[0-9a-fA-F]+>$", ">", e["name"])
            py[(a, b, _gt(e["pid"], e["tid"]), name, e["args"]["Python id"], e["args"]["Python parent id"])] += 1
    threads = {_gt(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M"
               and e.get("name") == "thread_name"}
    procs = {((e["pid"] & 0xFFFFFF) << 24, e["pid"], e["args"]["name"]) for e in ev if e.get("ph") == "M"
             and e.get("name") == "process_name"}
    ends = [k[1] for k in list(nvtx) + list(runtime) + list(kernel) + list(memcpy) + list(memset)
            if k[1] is not None] + [k[0] for k in list(marks) + list(nvtx)] + ([final] if final is not None else [])
    ranged = {k[4] for k in nvtx}
    bare = Counter(k[2] for k in runtime.elements() if k[2] not in ranged)
    return dict(nvtx=nvtx, marks=marks, runtime=runtime, kernel=kernel, memcpy=memcpy, memset=memset, py=py,
                threads=threads, procs=procs, duration=max(ends) + 1, events=len(ev),
                driver=doc.get("cuda_driver_version"), no_ts=no_ts, no_dur=no_dur, no_thread=no_thread, unknown=unknown,
                dup=sum(n - 1 for n in pairs.values()),
                bare=(sum(bare.values()), len(bare), len(ranged)) if nvtx and runtime and bare else None)


def warnings_by_hand(want: dict) -> list[str]:
    """The leading words of each warning the conversion must store, from the figures by hand."""
    out = []
    if want["no_ts"]:
        out.append(f"{want['no_ts']} trace events of interest have no ts")
    if want["no_dur"]:
        out.append(f"{want['no_dur']} complete ('X') trace events of interest have no dur")
    if want["no_thread"]:
        out.append(f"{want['no_thread']} user_annotation or CUDA runtime events have no integer pid and tid, or no name")
    if want["dup"]:
        out.append(f"{want['dup']} CUDA runtime events repeat the (process, correlation) of another")
    if want["unknown"]:
        out.append(f"{want['unknown']} gpu_memcpy events have a name that does not say the copy's direction")
    if not want["nvtx"]:
        out.append("the trace holds no user_annotation range")
    if not (want["runtime"] or want["kernel"] or want["memcpy"] or want["memset"]):
        out.append("the trace holds no CUDA event")
    if want["bare"]:
        calls, threads, ranged = want["bare"]
        out.append(f"{calls} CUDA runtime calls on {threads} threads with no user_annotation range, while {ranged} other "
                   "threads have ranges")
    return out


def check(out: str, want: dict, path: Path) -> None:
    """The converted file `out` against the tables by hand."""
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
        cuda = bool(want["runtime"] or want["kernel"] or want["memcpy"] or want["memset"])
        assert dict(q("SELECT * FROM META_DATA_CAPTURE")) == {"COLLECT_CUDA_TRACE": "true" if cuda else "false",
                                                              "COLLECT_NVTX_TRACE": "true"}
        if cuda:
            assert Counter((a, b, g, c, s[n]) for a, b, g, c, n in q(
                'SELECT start, "end", globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME')) \
                == want["runtime"]
            assert Counter((*r[:6], s[r[6]], s[r[7]], r[8]) for r in q(
                "SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")) == want["kernel"]
            assert Counter(q("SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY")) == want["memcpy"]
            assert Counter(q("SELECT * FROM CUPTI_ACTIVITY_KIND_MEMSET")) == want["memset"]
        else:
            assert not q("SELECT name FROM sqlite_master WHERE name LIKE 'CUPTI%'")
        if want["py"]:
            assert Counter((a, b, g, s[n], p & 0xFFFFFFFFFF, None if par is None else par & 0xFFFFFFFFFF)
                           for a, b, g, n, p, par in q("SELECT * FROM CLEF_PYTHON_FUNCTIONS")) == want["py"]
        else:
            assert not q("SELECT name FROM sqlite_master WHERE name = 'CLEF_PYTHON_FUNCTIONS'")
        assert {g: s[n] for n, _, g in q("SELECT * FROM ThreadNames")} == want["threads"]
        assert set(q("SELECT * FROM PROCESSES")) == want["procs"]
        assert q("SELECT duration FROM ANALYSIS_DETAILS") == [(want["duration"],)]
        assert q("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'") == \
            ([(str(want["driver"]),)] if want["driver"] else [])
        meta = dict(q("SELECT * FROM META_DATA_EXPORT"))
        facts = json.loads(meta["CLEF_SOURCE_FACTS"])
        assert (meta["CLEF_SOURCE"], meta["CLEF_SOURCE_PATH"]) == ("kineto", str(path.resolve()))
        assert facts["files"] == 1 and facts["file_names"] == [path.name] and facts["events"] == want["events"]
        assert facts["python_functions"] == sum(want["py"].values())
        warned = [w for (w,) in q("SELECT message FROM CLEF_WARNINGS")]
        said = warnings_by_hand(want)
        assert len(warned) == len(said) and all(w.startswith(x) for w, x in zip(warned, said)), (warned, said)
    finally:
        con.close()


@pytest.mark.parametrize("name", TRACES)
def test_conversion_row_by_row_against_a_reading_by_hand(tmp_path, monkeypatch, name):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    raw = lzma.decompress((DATA / f"{name}.pt.trace.json.xz").read_bytes())
    path = tmp_path / f"{name}.pt.trace.json"
    path.write_bytes(raw)
    want = oracle(json.loads(raw, parse_float=Decimal))
    check(kineto.to_export(str(path), quiet=True), want, path)
    con = sqlite3.connect(f"file:{kineto.to_export(str(path), quiet=True)}?mode=ro", uri=True)
    try:
        facts = json.loads(con.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'CLEF_SOURCE_FACTS'").fetchone()[0])
    finally:
        con.close()
    assert facts["time_precision"] == "1 ns (decimal microseconds)"
    assert sum(want["nvtx"].values()) > 0 and sum(want["runtime"].values()) > 0


def _enums(db) -> tuple[dict, dict]:
    """Kineto's copy kind and memory kind words -> nsys' own enum values, from the ENUM tables of
    a real nsys export (`CUDA_MEMCPY_KIND_HTOD` is `HtoD`, `..._DEVICE_STATIC` is `Device Static`)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        kinds = {n.removeprefix("CUDA_MEMCPY_KIND_"): i for i, n in con.execute(
            "SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER WHERE name NOT LIKE '%UVM%' AND name NOT LIKE '%UNKNOWN'")}
        mems = {label: i for i, label in con.execute(
            "SELECT id, label FROM ENUM_CUDA_MEM_KIND WHERE name NOT LIKE '%UNKNOWN'")}
    finally:
        con.close()
    words = {"HTOD": "HtoD", "DTOH": "DtoH", "HTOA": "HtoA", "ATOH": "AtoH", "ATOA": "AtoA", "ATOD": "AtoD",
             "DTOA": "DtoA", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP"}
    return {words[k]: v for k, v in kinds.items()}, mems


def test_handmade_trace_of_every_copy_kind_old_categories_flows_and_gaps(tmp_path, monkeypatch, capture):
    """A constructed trace with what the real ones lack: a copy of every kind between every memory
    kind nsys names (values from nsys' own ENUM tables), one whose name says no direction, the
    older categories Kernel/Memcpy/Memset, API and GPU events paired by ac2g flows only (no
    correlation arg), GPU events with no device or stream arg, events missing ts, dur, pid or
    with a category that is not text, a repeated correlation, and CUDA calls on a thread with no
    range while another has ranges. Every row and warning against the same reading by hand."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kinds, mems = _enums(capture("gpu25-bertsrv"))
    assert len(kinds) == 10 and len(mems) == 7
    ev = [{"ph": "X", "cat": "user_annotation", "name": "pooler n=2", "pid": 5, "tid": 6, "ts": "1000.000",
           "dur": "900.000"},
          {"ph": "X", "cat": "user_annotation", "name": "enqueued rid=r1", "pid": 5, "tid": 6, "ts": "1001.500",
           "dur": "0.000"},
          {"ph": "M", "name": "thread_name", "pid": 5, "tid": 6, "args": {"name": "main"}},
          {"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "srv"}}]
    t = 1010
    for k in kinds:
        for a in mems:
            t += 1
            ev.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {k} ({a} -> Device)", "pid": 0, "tid": 7,
                       "ts": f"{t}.250", "dur": "0.500", "args": {"correlation": t, "bytes": t, "device": 0,
                                                                 "stream": 7}})
    for b in mems:
        t += 1
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy HtoD (Pinned -> {b})", "pid": 0, "tid": 7,
                   "ts": f"{t}.250", "dur": "0.500", "args": {"correlation": t, "bytes": 8}})
    ev += [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy somewhere", "pid": 0, "tid": 7, "ts": "1500.000",
            "dur": "1.000", "args": {"bytes": 3}},
           {"ph": "X", "cat": "Kernel", "name": "old_kernel", "pid": 0, "tid": 7, "ts": "1510.000", "dur": "2.000",
            "args": {"correlation": 900, "device": 1, "stream": 9}},
           {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
            "ts": "1520.000", "dur": "2.000", "args": {"correlation": 901, "bytes": 64}},
           {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": "1530.000",
            "dur": "2.000", "args": {"correlation": 902, "bytes": 16}},
           # paired by flows only
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 6, "ts": "1600.000",
            "dur": "5.000", "args": {}},
           {"ph": "s", "cat": "ac2g", "id": 4242, "pid": 5, "tid": 6, "ts": "1600.000"},
           {"ph": "X", "cat": "kernel", "name": "k_flow", "pid": 0, "tid": 8, "ts": "1610.000", "dur": "3.000",
            "args": {}},
           {"ph": "f", "cat": "ac2g", "id": 4242, "pid": 0, "tid": 8, "ts": "1610.000"},
           # two calls of one correlation, CUDA calls on a thread without ranges
           {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 5, "tid": 66, "ts": "1700.000",
            "dur": "1.000", "args": {"correlation": 900}},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 5, "tid": 66, "ts": "1701.000",
            "dur": "1.000", "args": {"correlation": 900}},
           # damaged or foreign
           {"ph": "X", "cat": "cuda_runtime", "name": "no_ts", "pid": 5, "tid": 6, "dur": "1.000"},
           {"ph": "X", "cat": "user_annotation", "name": "no_dur", "pid": 5, "tid": 6, "ts": "1800.000"},
           {"ph": "X", "cat": "user_annotation", "name": "no_pid", "tid": 6, "ts": "1800.000", "dur": "1.000"},
           {"ph": "X", "cat": "cuda_runtime", "name": "no_tid", "pid": 5, "ts": "1800.000", "dur": "1.000"},
           {"ph": "X", "cat": 7, "name": "odd category", "pid": 5, "tid": 6, "ts": "1800.000", "dur": "1.000"},
           {"ph": "X", "name": "no category", "pid": 5, "tid": 6, "ts": "1800.000", "dur": "1.000"},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 6, "ts": "1800.000", "dur": "1.000"}]
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000, "cuda_driver_version": 12040,
           "traceEvents": ev}
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(doc))
    assert kineto.is_trace_file(str(path)) and kineto.trace_files(str(tmp_path)) == [str(path)]
    want = oracle(json.loads(path.read_text(), parse_float=Decimal), kinds, mems)
    assert (want["no_ts"], want["no_dur"], want["no_thread"], want["unknown"], want["dup"]) == (1, 1, 2, 1, 1)
    assert want["bare"] == (2, 1, 1) and sum(want["memcpy"].values()) == 10 * 7 + 7 + 2
    check(kineto.to_export(str(path), quiet=True), want, path)


def _one_range() -> dict:
    return {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "pooler n=1", "pid": 1, "tid": 1,
                                    "ts": "10.000", "dur": "5.000"}]}


def test_what_is_a_trace_by_its_first_4096_bytes(tmp_path):
    """A .json file is a trace when its first 4 KiB start a JSON array or name traceEvents,
    schemaVersion or deviceProperties (each alone here: the others come after 4 KiB of padding);
    gzip text named .json is sniffed after decompression, a .json.gz is one by its name; other JSON
    and manifest.json are not."""
    import gzip
    pad = "x" * 5000
    docs = {"array.json": json.dumps(_one_range()["traceEvents"]),
            "events.json": json.dumps({**_one_range(), "pad": pad}),
            "schema.json": json.dumps({"schemaVersion": 1, "pad": pad, **_one_range()}),
            "device.json": json.dumps({"deviceProperties": [], "pad": pad, **_one_range()}),
            "other.json": json.dumps({"pad": pad, "events": 1}),
            "manifest.json": json.dumps(_one_range())}
    for name, text in docs.items():
        (tmp_path / name).write_text(text)
    with gzip.open(tmp_path / "zipped.json", "wt") as fh:
        fh.write(json.dumps({**_one_range(), "pad": pad}))
    (tmp_path / "zipped-other.json").write_bytes(gzip.compress(b'{"pad": "' + pad.encode() + b'", "events": 1}'))
    # a .json.gz is taken for a trace by its name (the profiler's own suffix), whatever its first 4 KiB hold
    (tmp_path / "late.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps({"pad": pad, **_one_range()}).encode()))
    got = {os.path.basename(p) for p in kineto.trace_files(str(tmp_path))}
    assert got == {"array.json", "events.json", "schema.json", "device.json", "zipped.json", "late.pt.trace.json.gz"}
    assert not kineto.is_trace_file(str(tmp_path / "other.json"))


def test_a_folder_with_one_trace_of_no_interest_reads_the_other(tmp_path, monkeypatch):
    """Two traces of one run in a folder, one holding only cpu_op events: the folder converts,
    both files counted, the rows the other's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.json").write_text(json.dumps(_one_range()))
    (tmp_path / "run" / "b.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 2, "tid": 2, "ts": "11.000", "dur": "1.000"}]}))
    out = kineto.to_export(str(tmp_path / "run"), quiet=True)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        assert con.execute('SELECT start, "end", text FROM NVTX_EVENTS').fetchall() == [(0, 5000, "pooler n=1")]
        facts = json.loads(con.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'CLEF_SOURCE_FACTS'").fetchone()[0])
        assert facts["files"] == 2 and facts["events"] == 2
    finally:
        con.close()


@pytest.mark.parametrize("v", ["1e3", "1E3", "2.5e-1", "12", "0.0004", "0.0005", "-1.2345", "-0.0004", "123.4565",
                               "5286146034824.987", "1234.5", ".5", "7.", "-10.000", "abc", "1.2.3", "", "-", "1e",
                               5, -3, 1.5, True, None, [1]])
def test_microseconds_to_ns_against_decimal(v):
    """A trace's decimal microseconds to integer ns: exactly, a fourth decimal rounding half away
    from zero (Decimal's ROUND_HALF_UP); what is not a number is None."""
    from decimal import ROUND_HALF_UP, InvalidOperation
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        want = None
    else:
        try:
            want = int((Decimal(v) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        except InvalidOperation:
            want = None
    assert kineto._ns(v) == want


@pytest.mark.parametrize("events", [1, 70_000])     # one chunk; past the 4 MiB chunk the reader refills at
def test_damage_is_placed_at_its_character(tmp_path, events):
    """A stray character after the event array: the one-line error names the character offset
    of the damage in the decompressed text (str.index here), in the first chunk and past it."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "pooler n=1", "pid": 1, "tid": 1, "ts": f"{10 + i}.000",
           "dur": "0.500"} for i in range(events)]
    text = json.dumps({"traceEvents": ev})[:-1] + " x}"
    assert len(text) > (4 << 20) if events > 1 else len(text) < 4096
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(kineto.TraceError) as err:
        list(kineto.read_events(str(path)))
    at = text.rindex("x")
    assert f"expected ',' or '}}' between top-level keys at character {at}, found 'x'" in str(err.value)


def test_python_ids_stay_apart_between_the_files_of_a_folder(tmp_path, monkeypatch):
    """Two with_stack traces of one run (one per rank) that both number their Python ids from 1,
    one with an id past 40 bits: each file's ids are its own in CLEF_PYTHON_FUNCTIONS (the file's
    index above bit 40, the id's low 40 bits below), so a parent is found in its own file only."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    big = (1 << 40) + 1

    def doc(pid, ids):
        ev = [{"ph": "X", "cat": "user_annotation", "name": "pooler n=1", "pid": pid, "tid": pid, "ts": "10.000",
               "dur": "50.000"}]
        ev += [{"ph": "X", "cat": "python_function", "name": f"m.py({i}): f{i}", "pid": pid, "tid": pid,
                "ts": f"{11 + k}.000", "dur": "5.000", "args": {"Python id": i, "Python parent id": p}}
               for k, (i, p) in enumerate(ids)]
        return {"baseTimeNanoseconds": 1_000_000, "traceEvents": ev}

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.json").write_text(json.dumps(doc(3, [(big, None), (2, big)])))
    (tmp_path / "run" / "b.json").write_text(json.dumps(doc(4, [(1, None), (2, 1)])))
    out = kineto.to_export(str(tmp_path / "run"), quiet=True)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT globalTid >> 24, pyId, parentId FROM CLEF_PYTHON_FUNCTIONS ORDER BY start").fetchall()
    finally:
        con.close()
    mask = (1 << 40) - 1
    assert sorted(rows) == sorted([(3, big & mask, None), (3, 2, big & mask),
                                   (4, (1 << 40) | 1, None), (4, (1 << 40) | 2, (1 << 40) | 1)])


def test_a_damaged_event_under_64_mib_is_read_to_its_end(tmp_path):
    """An event whose name never closes, 40 MiB long: the reader keeps reading (an event may be
    that large), so the error is the one at the end of the file, not the early "invalid JSON" of
    an event past 64 MiB."""
    path = tmp_path / "long.json"
    with open(path, "w") as fh:
        fh.write('{"traceEvents": [{"ph": "X", "name": "')
        for _ in range(40):
            fh.write("a" * (1 << 20))
    with pytest.raises(kineto.TraceError) as err:
        list(kineto.read_events(str(path)))
    assert "the JSON is cut off or invalid at character 17" in str(err.value)


def test_every_figure_a_trace_cannot_give_is_said_with_its_reason(tmp_path, monkeypatch):
    """analyze of a trace with CUDA work (kineto-bert-pair): the capture's and the totals' figures
    that are None include the nsys version and graph executions, which the source facts name in
    not_available, each with a reason; it names no figure that is there."""
    from clef_prof.analyze.read.inputs import resolve
    from clef_prof.analyze.pipeline import analyze
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "bert.pt.trace.json"
    path.write_bytes(lzma.decompress((DATA / "kineto-bert-pair.pt.trace.json.xz").read_bytes()))
    r = analyze(resolve(str(path))[0]).result
    cap = r.to_json()["capture"]
    missing = {k for k, v in cap.items() if v is None and k == "nsys_version"}
    missing |= {k for k, v in r.to_json()["totals"].items() if v is None}
    na = cap["source"]["not_available"]
    assert {"nsys_version", "graph_executions"} <= missing and set(na) <= missing
    assert {"nsys_version", "graph_executions"} <= set(na) and all(isinstance(v, str) and v for v in na.values())


def test_the_array_format_past_a_chunk_and_a_cut_after_an_event(tmp_path):
    """The Chrome JSON array format (a top-level array, here longer than one 4 MiB chunk, closed
    or left open as the format allows, after its last event or a comma): every event read, against
    json.loads; a traceEvents array cut right after a whole event, or after a comma: the error says
    an event list was cut, where."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"pooler n=1 #{i}", "pid": 1, "tid": 1, "ts": f"{10 + i}.000",
           "dur": "0.500"} for i in range(60_000)]
    text = json.dumps(ev)
    assert len(text) > (4 << 20)
    for name, body in (("closed.json", text), ("open.json", text[:-1]), ("open-comma.json", text[:-1] + ",\n")):
        (tmp_path / name).write_text(body)
        assert [e["name"] for e in kineto.read_events(str(tmp_path / name))] == [e["name"] for e in json.loads(text)]
    cut = '{"traceEvents": [' + json.dumps(ev[0])
    (tmp_path / "cut.json").write_text(cut)
    with pytest.raises(kineto.TraceError) as err:
        list(kineto.read_events(str(tmp_path / "cut.json")))
    assert f"expected ',' or ']' between events at character {len(cut)}, found the end of the file (the JSON is cut off)" \
        in str(err.value)
    (tmp_path / "cut-comma.json").write_text(cut + ", ")        # after a comma: not the open array format either
    with pytest.raises(kineto.TraceError) as err:
        list(kineto.read_events(str(tmp_path / "cut-comma.json")))
    assert f"the JSON is cut off or invalid at character {len(cut) + 2} (Expecting value)" in str(err.value)


def test_an_event_list_that_ends_exactly_at_a_chunk_end(tmp_path):
    """A trace whose traceEvents' closing bracket is the last character of the first 4 MiB
    chunk (spaces pad it there): the list ends there and the rest of the object is read, every
    event against json.loads."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"r{i}", "pid": 1, "tid": 1, "ts": f"{10 + i}.000",
           "dur": "0.500"} for i in range(30_000)]
    head = '{"traceEvents": [' + ", ".join(json.dumps(e) for e in ev)
    pad = (4 << 20) - len(head) - 1
    assert pad > 0
    text = head + " " * pad + "]" + ', "schemaVersion": 1}'
    assert text[(4 << 20) - 1] == "]"
    (tmp_path / "edge.json").write_text(text)
    meta = {}
    got = list(kineto.read_events(str(tmp_path / "edge.json"), lambda k, v: meta.__setitem__(k, v)))
    assert [e["name"] for e in got] == [e["name"] for e in json.loads(text)["traceEvents"]] and meta == {"schemaVersion": 1}


def test_whole_microseconds_convert_and_say_their_precision(tmp_path, monkeypatch):
    """A trace written with integer microseconds (older profilers): rows in ns by hand, and the
    capture facts say the precision is 1 us."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "int.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "pooler n=1", "pid": 1, "tid": 1, "ts": 100, "dur": 7},
        {"ph": "X", "cat": "user_annotation", "name": "head", "pid": 1, "tid": 1, "ts": 102, "dur": 3}]}))
    out = kineto.to_export(str(path), quiet=True)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        rows = con.execute('SELECT start, "end", text FROM NVTX_EVENTS ORDER BY start').fetchall()
        facts = json.loads(con.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'CLEF_SOURCE_FACTS'").fetchone()[0])
    finally:
        con.close()
    assert rows == [(0, 7000, "pooler n=1"), (2000, 5000, "head")]
    assert facts["time_precision"] == "1 us (the trace holds whole microseconds)"
