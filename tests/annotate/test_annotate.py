"""clef_prof.stage / clef_prof.batch through the ctypes NVTX client, checked on real captures.

A small program annotated with clef_prof is recorded with `nsys profile -t nvtx,osrt` by
Nsight Systems 2022.4 and 2023.4 (scripts/install-nsys.sh), exported to SQLite, and the
NVTX_EVENTS rows are compared with what the program emitted: names, counts, domains,
nesting, the batch message and payload. The same export then goes through the analyzer.
A second program shows the point of the client: with `nvtx==0.2.16` in the environment,
nsys records clef_prof's ranges and none of the `nvtx` package's own.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.annotate import api as annotate, nvtx_client
from clef_prof.analyze.pipeline import analyze
from recording import nvtx_python, record

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("2022.4", "2023.4")
STAGES = ("parse", "index", "transfer", "head", "encode")
ENV = {"PYTHONPATH": str(ROOT)}

# Sync batches of sizes 4, 2, 3 using every sync form of the API, then one async batch of 5
# (start/end ranges), a mark, and a worker thread emitting 7 ranges in its own domain.
PROGRAM = """
import asyncio, threading
import clef_prof
from clef_prof.annotate import api as annotate, nvtx_client

def worker():
    for i in range(7):
        with clef_prof.stage("tick", domain="clef-worker"):
            pass

t = threading.Thread(target=worker)
t.start()                   # the worker's first stage() and the main thread's race to initialise

@clef_prof.stage("index")
def index(x):
    return x + 1

for k, n in enumerate((4, 2, 3)):
    with clef_prof.batch(n=n, request_ids=[f"r{k}.{i}" for i in range(n)]):
        with clef_prof.stage("parse"):
            pass
        index(n)
        annotate.push("transfer")
        annotate.pop()
        with clef_prof.stage("head"):
            pass
        with clef_prof.stage("encode"):
            pass

nvtx_client.Domain("clef").mark("ready")

@clef_prof.stage("transfer")
async def transfer():
    await asyncio.sleep(0.001)

async def serve():
    async with clef_prof.batch(request_ids=list(range(5))):
        async with clef_prof.stage("parse"):
            await asyncio.sleep(0.001)
        with clef_prof.stage("index"):
            pass
        await transfer()
        with clef_prof.stage("head"):
            pass
        async with clef_prof.stage("encode"):
            await asyncio.sleep(0)

asyncio.run(serve())
t.join()
assert nvtx_client.enabled(), nvtx_client.init_error()
"""


@pytest.fixture(scope="module", params=[pytest.param(v, marks=pytest.mark.nsys(v)) for v in VERSIONS])
def recorded(request, tmp_path_factory):
    """(nsys version, SQLite export of PROGRAM recorded by it)."""
    out = tmp_path_factory.mktemp(f"annotate-{request.param}")
    return request.param, record(PROGRAM, out, version=request.param, env=ENV)


def _rows(db: Path, sql: str, *args):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _events(db: Path, domain: str):
    """(eventType, registered text, ascii text, int64 payload, start, end, globalTid) of `domain`."""
    return _rows(db, """SELECT e.eventType, s.value, e.text, e.int64Value, e.start, e."end", e.globalTid
                        FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                        WHERE e.eventType != 75 AND e.domainId IN
                              (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?)
                        ORDER BY e.start""", domain)


def test_ranges_recorded_exactly(recorded):
    version, db = recorded
    domains = sorted(r[0] for r in _rows(db, "SELECT text FROM NVTX_EVENTS WHERE eventType = 75"))
    assert domains == ["clef", "clef-worker"], (version, domains)

    ev = _events(db, "clef")
    batches = [r for r in ev if r[2] and r[2].startswith("pooler")]
    assert [(r[0], r[2], r[3]) for r in batches] == [
        (59, "pooler n=4 rid=r0.0,r0.1,r0.2,r0.3", 4),
        (59, "pooler n=2 rid=r1.0,r1.1", 2),
        (59, "pooler n=3 rid=r2.0,r2.1,r2.2", 3),
        (60, "pooler n=5 rid=0,1,2,3,4", 5)]
    assert all(r[1] is None for r in batches)            # ASCII messages: text, no textId

    stages = [r for r in ev if r[1] is not None]         # registered names: textId, no text
    assert all(r[2] is None and r[3] is None for r in stages)
    assert [(r[0], r[1]) for r in stages] == (
        [(59, s) for s in STAGES] * 3 + [(60, "parse"), (59, "index"), (60, "transfer"), (59, "head"), (60, "encode")])
    # the registered names are stored once per domain
    for s in STAGES:
        assert _rows(db, "SELECT count(*) FROM StringIds WHERE value = ?", s)[0][0] == 1, s

    marks = [r for r in ev if r[0] == 34]
    assert [(r[2], r[5]) for r in marks] == [("ready", None)]
    assert len(ev) == len(batches) + len(stages) + len(marks)

    # every range is closed, the five stages of a batch lie inside it, on its thread
    main_tid = {r[6] for r in ev}
    assert len(main_tid) == 1
    for i, b in enumerate(batches):
        inside = stages[5 * i: 5 * i + 5]
        assert all(b[4] <= s[4] <= s[5] <= b[5] for s in inside), (version, b, inside)
        assert all(s[4] >= p[5] for p, s in zip(inside, inside[1:]))

    worker = _events(db, "clef-worker")
    assert [(r[0], r[1]) for r in worker] == [(59, "tick")] * 7
    assert {r[6] for r in worker}.isdisjoint(main_tid)


def test_analyzer_reads_the_capture(recorded):
    version, db = recorded
    r = analyze(str(db)).result
    assert (r.batches, r.requests) == (4, 14), (version, r.warnings)
    assert r.requests_source.startswith("message")
    assert {s: v.instances for s, v in r.stages.items()} == {s: 4 for s in STAGES}
    (t,) = r.capture.threads
    assert t.batches == 4 and t.stage_instances == {s: 4 for s in STAGES}
    assert not any("no range" in w or "thread" in w for w in r.warnings), r.warnings


NVTX_PKG_PROGRAM = """
import os
from importlib.metadata import version
import nvtx
import clef_prof

assert version("nvtx") == os.environ["EXPECT_NVTX"], version("nvtx")
nvtx.push_range("nvtx-before", domain="nvtx-pkg")
nvtx.pop_range(domain="nvtx-pkg")
for n in (1, 2):
    with clef_prof.batch(n=n):
        for s in ("parse", "index", "transfer", "head", "encode"):
            with clef_prof.stage(s):
                with nvtx.annotate("nvtx-inner", domain="nvtx-pkg"):
                    pass
with nvtx.annotate("nvtx-after", domain="clef"):
    pass
"""


@pytest.mark.parametrize("nvtx_version, version, pkg_ranges", [
    pytest.param("0.2.16", "2022.4", 0, marks=pytest.mark.nsys("2022.4")),
    pytest.param("0.2.16", "2023.4", 0, marks=pytest.mark.nsys("2023.4")),
    # the control: the query does see the package's ranges when they exist
    pytest.param("0.2.11", "2023.4", 12, marks=pytest.mark.nsys("2023.4")),
])
def test_ranges_survive_nvtx_0_2_16(nvtx_version, version, pkg_ranges, tmp_path):
    """nsys <= 2023.4 drops every range of the `nvtx` package >= 0.2.12, never clef_prof's."""
    py = nvtx_python(nvtx_version)
    db = record(NVTX_PKG_PROGRAM, tmp_path, version=version, python=py, env={**ENV, "EXPECT_NVTX": nvtx_version})
    got = _rows(db, """SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                       WHERE e.eventType IN (59, 60) AND COALESCE(s.value, e.text) LIKE 'nvtx-%'""")
    assert got == [(pkg_ranges,)]
    ev = _events(db, "clef")
    assert [(r[0], r[2], r[3]) for r in ev if r[2]] == [(59, "pooler n=1", 1), (59, "pooler n=2", 2)]
    assert [r[1] for r in ev if r[1] and not r[1].startswith("nvtx-")] == list(STAGES) * 2
    r = analyze(str(db)).result
    assert (r.batches, r.requests) == (2, 3)
    assert {s: v.instances for s, v in r.stages.items()} == {s: 2 for s in STAGES}


# ---- without a profiler (subprocesses: the client's state is fixed once per process) ----

NOOP_PROGRAM = """
import json, os, sys
import clef_prof
from clef_prof.annotate import api as annotate, nvtx_client

def f(x):
    return x * 2

g = clef_prof.stage("index")(f)
with clef_prof.batch(n=3, request_ids=[1, 2, 3]), clef_prof.stage("parse"):
    annotate.push("transfer", payload=1)
    annotate.pop()
d = nvtx_client.Domain("clef")
print(json.dumps({"enabled": nvtx_client.enabled(), "error": nvtx_client.init_error(),
                  "g": g(21), "wrapped": g.__wrapped__ is f, "push": d.push("x"), "pop": d.pop(),
                  "handle": d.handle, "same": clef_prof.stage("index") is clef_prof.stage("index"),
                  "bound": nvtx_client._push is not None}))
"""


def _noop_run(env_update: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    env.update(ENV, **env_update)
    p = subprocess.run([sys.executable, "-c", NOOP_PROGRAM], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("injection, error", [
    (None, None),
    ("/nonexistent/libToolsInjection64.so", "cannot load NVTX_INJECTION64_PATH=/nonexistent"),
    ("libm", "has no InitializeInjectionNvtx2"),
], ids=["unset", "missing-library", "not-an-injection"])
def test_no_profiler_is_a_no_op(injection, error):
    if injection == "libm":                    # a real library without the entry point
        injection = ctypes.util.find_library("m")
        assert injection, "ctypes.util.find_library('m') found no libm"
    r = _noop_run({"NVTX_INJECTION64_PATH": injection} if injection else {})
    assert r == {"enabled": False, "error": r["error"], "g": 42, "wrapped": True, "push": -2, "pop": -2,
                 "handle": None, "same": True, "bound": False}
    if error is None:
        assert r["error"] is None
    else:
        assert error in r["error"]


def test_event_attributes_layout_matches_nvtoolsext_h():
    """nvtxEventAttributes_v2 on LP64: field offsets as in nvToolsExt.h, 48 bytes."""
    a = nvtx_client.EventAttributes
    assert [(name, getattr(a, name).offset) for name, _ in a._fields_] == [
        ("version", 0), ("size", 2), ("category", 4), ("colorType", 8), ("color", 12),
        ("payloadType", 16), ("reserved0", 20), ("payload", 24), ("messageType", 32), ("message", 40)]
    assert ctypes.sizeof(a) == nvtx_client.ATTR_SIZE == 48


def test_batch_message():
    assert annotate.batch_message(n=4) == "pooler n=4"
    assert annotate.batch_message("decode", 2, ["a", "b"]) == "decode n=2 rid=a,b"
    long = annotate.batch_message(n=2000, request_ids=range(2000))
    assert long.startswith("pooler n=2000 rid=0,1,2,") and long.endswith(",...")
    assert len(long) <= len("pooler n=2000 rid=") + annotate.RID_MAX_CHARS + 4
    assert long[:-4].rsplit(",", 1)[1].isdigit()    # cut between ids, not inside one
