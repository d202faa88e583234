"""One server, one session, two profilers: the demo server (variant pr) on an H200 recorded with
the PyTorch profiler and then with nsys 2025.3, the same load (tests/data/kineto-pair-pr.* and
gpu25-pair-pr.*; scripts/gpu-kineto-parity.sh made them). Both give the server's own count of
requests and batches, the same CUDA counts per request and per stage, and host time per stage
within the tolerance docs/kineto.md states; each figure is held against a count made here
from the raw trace (json.load) or the export (SQL), sharing no code with the readers.
"""
from __future__ import annotations

import gzip
import json
import lzma
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from clicheck import run_main
from conftest import sql

DATA = Path(__file__).resolve().parents[1] / "data"
STAGES = ("parse", "index", "transfer", "head", "encode")
# torch / nsys host time per stage, per request: the band docs/kineto.md states (measured 0.78-1.04)
TOLERANCE = (0.7, 1.3)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory, captures_dir):
    d = tmp_path_factory.mktemp("pair")
    trace = d / "pair.pt.trace.json.gz"
    with lzma.open(DATA / "kineto-pair-pr.pt.trace.json.xz") as src, gzip.open(trace, "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.chmod(0o444)
    export = captures_dir / "gpu25-pair-pr.sqlite"
    if not export.exists():
        with lzma.open(DATA / "gpu25-pair-pr.sqlite.xz") as src, open(export, "wb") as dst:
            shutil.copyfileobj(src, dst)
    truth = {k: json.loads((DATA / f"{n}.truth.json").read_text())
             for k, n in (("torch", "kineto-pair-pr"), ("nsys", "gpu25-pair-pr"))}
    return {"torch": (trace, analyze(resolve(str(trace))[0]).result),
            "nsys": (export, analyze(str(export)).result), "truth": truth}


def torch_oracle(path: Path) -> dict:
    """Per-request host ms of each stage and the batch, and the request count, from user_annotation
    events counted with json.load."""
    ev = json.load(gzip.open(path))["traceEvents"]
    ns, n = defaultdict(float), 0
    for e in ev:
        if e.get("cat") != "user_annotation" or e.get("ph") != "X":
            continue
        if e["name"].startswith("pooler "):
            n += int(re.search(r"\bn=(\d+)", e["name"]).group(1))
            ns["pooler"] += float(e["dur"]) * 1e3
        elif e["name"] in STAGES:
            ns[e["name"]] += float(e["dur"]) * 1e3
    return {"requests": n, **{k: v / n / 1e6 for k, v in ns.items()}}


def nsys_oracle(path: Path) -> dict:
    """The same from NVTX_EVENTS by SQL."""
    rows = sql(path, "SELECT coalesce(e.text, s.value), e.end - e.start FROM NVTX_EVENTS e "
                     "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL")
    ns, n = defaultdict(int), 0
    for text, dur in rows:
        if text.startswith("pooler "):
            n += int(re.search(r"\bn=(\d+)", text).group(1))
            ns["pooler"] += dur
        elif text in STAGES:
            ns[text] += dur
    return {"requests": n, **{k: v / n / 1e6 for k, v in ns.items()}}


@pytest.mark.parametrize("profiler", ("torch", "nsys"))
def test_each_gives_the_servers_count_and_its_own_oracles_figures(pair, profiler):
    path, r = pair[profiler]
    truth = pair["truth"][profiler]
    assert (r.requests, r.batches) == (truth["server_counts"]["requests"], truth["server_counts"]["batches"])
    assert not r.warnings
    o = (torch_oracle if profiler == "torch" else nsys_oracle)(path)
    assert o["requests"] == r.requests
    for s in STAGES:
        assert r.stages[s].host_ms_per_request == pytest.approx(o[s], rel=1e-9), s
        assert r.stages[s].instances == r.batches
    assert r.pooler.host_ms_per_request == pytest.approx(o["pooler"], rel=1e-9)


def test_same_counts_per_request_and_per_stage(pair):
    """CUDA counts are exact under both: the server's design (3 pinned H2D copies, 3424 B, 15
    kernel launches and one graph launch per request, all in their stage; one D2H per batch)."""
    k, n = pair["torch"][1], pair["nsys"][1]
    design = pair["truth"]["torch"]["design_per_request"]
    for r in (k, n):
        per = r.per_request
        assert (per.h2d_copies, per.h2d_bytes, per.kernel_launches, per.graph_launches) == (
            design["h2d_copies"], design["h2d_bytes"], design["kernel_launches"], design["graph_launches"])
        assert r.totals.h2d_pinned == r.totals.h2d_copies
        assert r.totals.d2h_copies == r.batches
        assert r.stages["transfer"].cuda.h2d_copies == r.totals.h2d_copies
        assert r.stages["head"].cuda.kernel_launches == r.totals.kernel_launches
    for s in STAGES:
        for f in ("h2d_copies", "h2d_bytes", "kernel_launches", "graph_launches"):
            assert getattr(k.stages[s].cuda_per_request, f) == getattr(n.stages[s].cuda_per_request, f), (s, f)


def test_host_time_per_stage_within_the_stated_band(pair):
    """Host time differs by what each profiler adds per range and per CUDA call: torch / nsys per
    request, stage by stage and for the whole batch, inside the band docs/kineto.md states. Of
    the two, torch is the lighter here in every stage but parse (the oracles' figures)."""
    k, n = torch_oracle(pair["torch"][0]), nsys_oracle(pair["nsys"][0])
    ratios = {s: k[s] / n[s] for s in (*STAGES, "pooler")}
    assert all(TOLERANCE[0] <= v <= TOLERANCE[1] for v in ratios.values()), ratios
    assert ratios["pooler"] < 1 and sum(v < 1 for v in ratios.values()) >= 5, ratios


def test_the_server_is_named_by_its_program_not_records_env_wrapper(capture):
    """record launches the server as `env -u TMPDIR SERVER...`: nsys' PROCESSES row of the server
    says `env`, while its main thread (tid = pid) has the exec'd program's name. The report's
    threads and the Chrome trace's process names (explore's names) give that program's name;
    a process whose launched name is its own keeps it."""
    import sqlite3

    from clef_prof.explore.frames import Capture
    from clef_prof.base.redact import process_name

    path = capture("gpu25-pair-pr")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = dict(con.execute(
        "SELECT p.pid, p.name || '|' || coalesce((SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId "
        "WHERE t.globalTid = p.globalPid + p.pid), '') FROM PROCESSES p WHERE p.pid IN (631, 668)"))
    con.close()
    assert rows == {668: "env|python3", 631: "python3|python3"}
    a = analyze(str(path))
    assert [(t.pid, t.process) for t in a.result.capture.threads] == [(668, "python3")]
    names = Capture(a)._names[1]
    assert (names[668], names[631]) == ("python3", "python3")
    assert "(env)" not in run_main("analyze", path).stdout
    assert (process_name("env", ""), process_name("/usr/bin/env", "python3.11"), process_name("nsys", "python3")) == \
        ("env", "python3.11", "nsys")
