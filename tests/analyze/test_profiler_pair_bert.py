"""The parity pair on third-party code: tests/programs/bertsrv (transformers' BertModel behind
aiohttp, stages injected from a spec) recorded on an H200 in one session with the PyTorch
profiler and then with nsys 2025.3, the same load (tests/data/kineto-bert-pair.*,
gpu25-bert-pair.*; scripts/gpu-kineto-parity.sh with SERVERS=bertsrv made them).

The two recordings batch differently (each profiler slows the server by its own amount, so the
batcher gathers 9.8 requests a batch under torch and 8.0 under nsys): the CUDA work of a batch is
the same under both, copy by copy and launch by launch, and each count is held against one made
here from the raw trace (json.load) or the export (SQL). Host time per stage is not compared: at
different batch sizes a per-request time is not the same quantity (docs/kineto.md)."""
from __future__ import annotations

import json
import lzma
import re
import shutil
from pathlib import Path

import pytest

from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.stages import StageConfig
from conftest import sql

DATA = Path(__file__).resolve().parents[1] / "data"
TRUTH = json.loads((DATA / "bert-pair.truth.json").read_text())
CFG = StageConfig(stages=("parse", "transfer", "head", "encode"))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("bertpair")
    trace, export = d / "bert.pt.trace.json", d / "bert.sqlite"
    for src, dst in ((DATA / "kineto-bert-pair.pt.trace.json.xz", trace), (DATA / "gpu25-bert-pair.sqlite.xz", export)):
        with lzma.open(src) as s, open(dst, "wb") as o:
            shutil.copyfileobj(s, o)
    return {"torch": (trace, analyze(resolve(str(trace))[0], CFG).result), "nsys": (export, analyze(str(export), CFG).result)}


def torch_counts(path: Path) -> dict:
    """Batches, requests and CUDA work from the trace's events with json.load: batch ranges
    (`pooler n=K`), H2D/D2H memcpy rows, kernel rows (every one launched from a batch's thread)."""
    ev = json.loads(path.read_text())["traceEvents"]
    batches = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("pooler ")]
    tids = {e["tid"] for e in batches}
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e["tid"] in tids and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy") and e.get("args", {}).get("correlation") in launched]
    return {"batches": len(batches), "requests": sum(int(re.search(r"n=(\d+)", e["name"]).group(1)) for e in batches),
            "h2d": sum(e["cat"] == "gpu_memcpy" and "HtoD" in e["name"] for e in gpu),
            "d2h": sum(e["cat"] == "gpu_memcpy" and "DtoH" in e["name"] for e in gpu),
            "kernels": sum(e["cat"] == "kernel" for e in gpu),
            "h2d_bytes": sum(e["args"].get("bytes", 0) for e in gpu if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"])}


def nsys_counts(path: Path) -> dict:
    """The same by SQL: batch ranges, and the CUDA rows whose runtime/driver call was made on a
    batch range's thread inside a batch range."""
    inside = ("SELECT r.correlationId FROM {t} r JOIN (SELECT e.globalTid g, e.start s, e.end x FROM NVTX_EVENTS e "
              "LEFT JOIN StringIds n ON n.id = e.textId WHERE e.eventType = 59 AND coalesce(e.text, n.value) LIKE "
              "'pooler %') b ON r.globalTid = b.g AND r.start >= b.s AND r.end <= b.x")
    calls = f"({inside.format(t='CUPTI_ACTIVITY_KIND_RUNTIME')})"
    names = [t for (t,) in sql(path, "SELECT value FROM StringIds s JOIN NVTX_EVENTS e ON e.textId = s.id "
                                      "WHERE e.eventType = 59 AND s.value LIKE 'pooler %'")]
    names += [t for (t,) in sql(path, "SELECT text FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'pooler %'")]
    return {"batches": len(names), "requests": sum(int(re.search(r"n=(\d+)", t).group(1)) for t in names),
            "h2d": sql(path, f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND correlationId IN {calls}")[0][0],
            "d2h": sql(path, f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 AND correlationId IN {calls}")[0][0],
            "kernels": sql(path, f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IN {calls}")[0][0],
            "h2d_bytes": sql(path, f"SELECT SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND "
                                   f"correlationId IN {calls}")[0][0]}


@pytest.mark.parametrize("profiler", ("torch", "nsys"))
def test_each_gives_the_servers_count_and_the_oracles_cuda_counts(pair, profiler):
    path, r = pair[profiler]
    o = (torch_counts if profiler == "torch" else nsys_counts)(path)
    truth = TRUTH[profiler]["server_counts"]
    assert (r.requests, r.batches) == (o["requests"], o["batches"]) == (truth["requests"], truth["batches"])
    t = r.totals
    assert (t.h2d_copies, t.d2h_copies, t.h2d_bytes) == (o["h2d"], o["d2h"], o["h2d_bytes"])
    assert t.kernel_launches == o["kernels"] > 0


def test_the_same_cuda_work_per_batch_under_both(pair):
    """bertsrv's batch, under either profiler: BatchEncoding.to's 3 H2D copies, two D2H (one
    inside BertModel.forward, one the pooled rows' .cpu() after it), the same kernel launches
    (BertModel.forward), and the same H2D bytes per request (its padded token rows)."""
    per = {}
    for p in ("torch", "nsys"):
        r = pair[p][1]
        t = r.totals
        per[p] = (t.h2d_copies / r.batches, t.d2h_copies / r.batches, t.kernel_launches / r.batches,
                  r.per_request.h2d_bytes, r.stages["transfer"].cuda.h2d_copies / r.batches,
                  r.stages["head"].cuda.kernel_launches / r.batches, r.stages["head"].cuda.d2h_copies / r.batches)
    assert per["torch"] == per["nsys"]
    assert per["torch"][:2] == (3, 2) and per["torch"][-1] == 1 and per["torch"][2] == int(per["torch"][2])
    assert TRUTH["torch"]["server_counts"]["requests"] / TRUTH["torch"]["server_counts"]["batches"] > \
        TRUTH["nsys"]["server_counts"]["requests"] / TRUTH["nsys"]["server_counts"]["batches"]


def test_the_finding_names_the_stages_python_functions_with_their_interval(pair):
    """The nsys side carries clef-prof's sampler (100 Hz): the finding that blames parse names the
    function its samples fall in, with its interval, and the counts are the export's: samples in
    parse ranges on their own thread, and their innermost frames, decoded here from StringIds."""
    from conftest import SAMPLES_IN_HEAD
    path, r = pair["nsys"]
    s = r.samples
    assert s is not None and s.source == "clef-prof sampler"
    assert s.stages["parse"].samples == sql(path, SAMPLES_IN_HEAD.replace("'head'", "'parse'"))[0][0] > 30
    # innermost frame of each sample in parse, by hand: `t PID TID` marks, their stack id payload
    strings = dict(sql(path, "SELECT id, value FROM StringIds WHERE value LIKE 'clef-prof %'"))
    frames = {k.split(" ", 2)[2].split("\t")[0]: v.split("\t")[1:3] for k, v in
              ((v, v) for v in strings.values() if v.startswith("clef-prof frame "))}
    stacks = {v.split("\t")[0].split(" ", 2)[2]: v.split("\t")[1].split() for v in strings.values()
              if v.startswith("clef-prof stack ")}
    rows = sql(path, SAMPLES_IN_HEAD.replace("count(*)", "m.int64Value, t.value").replace("'head'", "'parse'"))
    leaf = {}
    for sid, who in rows:
        pid = who.split()[1]
        fn, file = frames[f"{pid}:{stacks[f'{pid}:{sid}'][0]}"]
        leaf[(fn, file)] = leaf.get((fn, file), 0) + 1
    top = s.stages["parse"].top_self[0]
    assert top.self_samples == max(leaf.values()) == leaf[(top.function, top.file)]
    f = next(f for f in r.findings if f.id in ("host-bound", "dominant-stage"))
    assert f"{top.function} ({top.file.rsplit('/', 1)[-1]}) {round(100 * top.self_share)}% [" in f.summary
