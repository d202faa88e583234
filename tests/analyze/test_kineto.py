"""PyTorch profiler (Kineto) traces as captures (clef_prof.analyze.read.kineto).

Real figures: two traces of the demo server recorded with `clef-prof record --profiler torch` on an
H200 (torch 2.11, tests/data/kineto-demo-*.pt.trace.json.xz), held against (1) the server's own
count of the requests and batches in the profiling window times the per-request design of the
demo server (its docstring: 9 pageable or 3 pinned H2D copies and 3424 bytes per request, 15 kernel
launches and one graph launch of 3 kernels per request, one D2H copy per batch), and (2) the same
counts made here with json.load and plain Python over the trace (an oracle that shares no code with
the reader). Hostile inputs: tiny hand-written traces (never the source of a figure).
"""
from __future__ import annotations

import gzip
import json
import lzma
import os
import shutil
from pathlib import Path

import pytest

from clef_prof.analyze.read import kineto
from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.errors import CaptureError
from clicheck import run_main

DATA = Path(__file__).resolve().parents[1] / "data"
VARIANTS = ("main", "pr")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """variant -> (the trace as a .pt.trace.json.gz file, its truth)."""
    out = {}
    d = tmp_path_factory.mktemp("kineto")
    for v in VARIANTS:
        path = d / f"demo-{v}.pt.trace.json.gz"
        with lzma.open(DATA / f"kineto-demo-{v}.pt.trace.json.xz") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.chmod(0o444)
        out[v] = (path, json.loads((DATA / f"kineto-demo-{v}.truth.json").read_text()))
    return out


def oracle(path: Path) -> dict:
    """The capture's CUDA totals counted straight from the JSON: memcpy events by their name and
    bytes arg, launch API events by name, kernels whose correlation is a cudaGraphLaunch's."""
    doc = json.load(gzip.open(path))
    ev = doc["traceEvents"]
    api = {e["args"]["correlation"]: e["name"] for e in ev if e.get("cat") == "cuda_runtime"}
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    h2d = [e for e in copies if e["name"].startswith("Memcpy HtoD")]
    d2h = [e for e in copies if e["name"].startswith("Memcpy DtoH")]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    return {"h2d_copies": len(h2d), "h2d_bytes": sum(e["args"]["bytes"] for e in h2d),
            "h2d_pinned": sum("(Pinned ->" in e["name"] for e in h2d),
            "h2d_pageable": sum("(Pageable ->" in e["name"] for e in h2d),
            "d2h_copies": len(d2h), "d2h_bytes": sum(e["args"]["bytes"] for e in d2h),
            "kernel_launches": sum(n == "cudaLaunchKernel" for n in api.values()),
            "graph_launches": sum(n == "cudaGraphLaunch" for n in api.values()),
            "gpu_kernels": len(kernels),
            "graph_kernels": sum(api.get(e["args"]["correlation"]) == "cudaGraphLaunch" for e in kernels)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_real_trace_totals(real, variant):
    path, truth = real[variant]
    r = analyze(resolve(str(path))[0]).result
    t = r.totals
    got = {k: getattr(t, k) for k in ("h2d_copies", "h2d_bytes", "h2d_pinned", "h2d_pageable", "d2h_copies",
                                      "d2h_bytes", "kernel_launches", "graph_launches", "gpu_kernels",
                                      "graph_kernels")}
    assert got == oracle(path)
    # the demo server's design times its own count of the window (profiler started and stopped on
    # the batching thread between two batches: the trace holds exactly those batches)
    n, b = truth["server_counts"]["requests"], truth["server_counts"]["batches"]
    per = truth["design_per_request"]
    assert (t.h2d_copies, t.h2d_bytes) == (per["h2d_copies"] * n, per["h2d_bytes"] * n)
    assert (t.h2d_pinned if per["h2d_pinned"] else t.h2d_pageable) == t.h2d_copies
    assert (t.kernel_launches, t.graph_launches, t.graph_kernels) == (15 * n, n, 3 * n)
    assert t.d2h_copies == truth["design_per_batch"]["d2h_copies"] * b
    assert r.path == str(path)
    src = r.capture.source
    assert src["format"] == "kineto" and src["time_precision"].startswith("1 ns")
    assert r.capture.nsys_version is None and "nsys_version" in src["not_available"]
    assert r.capture.cuda_driver_version == 13000
    # clef-prof's batch and stage ranges are record_function (user_annotation) events: the batches
    # and requests are the server's own count, and every copy and launch lies in its stage
    assert (r.requests, r.batches) == (n, b)
    assert not r.warnings
    assert r.stages["transfer"].cuda.h2d_copies == t.h2d_copies
    assert r.stages["head"].cuda.kernel_launches == t.kernel_launches
    assert r.stages["head"].cuda.graph_launches == t.graph_launches
    assert {s.instances for s in r.stages.values()} == {b}
    assert r.to_json()["capture"]["source"]["format"] == "kineto"


NSYS_TWIN = {"pr": "gpu25-q1c16-pr", "main": "gpu-q1c16-main"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_parity_with_nsys_per_request_and_stage(real, capture, variant):
    """The same demo server and load recorded once with the torch profiler (these traces) and once
    with nsys (tests/data: 2025.3 for pr, 2023.4 for main): other windows, so totals differ, but
    the per-request and per-stage CUDA counts are the same, figure for figure, and D2H per batch."""
    k = analyze(resolve(str(real[variant][0]))[0]).result
    ns = analyze(str(capture(NSYS_TWIN[variant]))).result
    for f in ("h2d_copies", "h2d_bytes", "kernel_launches", "graph_launches"):
        assert getattr(k.per_request, f) == pytest.approx(getattr(ns.per_request, f), rel=1e-12), f
        for s in ("parse", "index", "transfer", "head", "encode"):
            assert getattr(k.stages[s].cuda_per_request, f) == pytest.approx(
                getattr(ns.stages[s].cuda_per_request, f), rel=1e-12), (s, f)
    assert k.totals.d2h_copies / k.batches == ns.totals.d2h_copies / ns.batches == 1


def test_real_trace_ns_precision(real, tmp_path):
    """Start times are the trace's decimal microseconds as integer ns, exactly (no float rounding)."""
    import sqlite3
    path, _ = real["pr"]
    doc = json.load(gzip.open(path), parse_float=str)
    ev = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    base = doc["baseTimeNanoseconds"]
    db = sqlite3.connect(resolve(str(path))[0])
    starts = [s for (s,) in db.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")]
    whole, frac = ev[0]["ts"].split(".")
    exact = [int(e["ts"].split(".")[0]) * 1000 + int((e["ts"].split(".")[1] + "000")[:3]) for e in ev]
    assert len(whole) > 9 and len(frac) == 3 and base > 0
    assert sorted(s - starts[0] for s in starts) == sorted(x - min(exact) for x in exact)


def test_cli_accepts_trace_file_and_folder(real, tmp_path):
    path, truth = real["main"]
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    for arg in (path, folder):
        p = run_main("analyze", "--format", "json", arg)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["totals"]["h2d_copies"] == 9 * truth["server_counts"]["requests"]
    p = run_main("analyze", "--strict", path)
    assert p.returncode == 0, p.stdout      # stage ranges present, nothing to warn about


# --- hostile inputs: tiny hand-written traces --------------------------------------------------
def trace(events, **top):
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000, **top, "traceEvents": events}


def batch_events(pid=10, tid=11, t0=1000.0, corr0=1, n=3):
    """n batches of 2 requests on one thread: a transfer stage with one pinned H2D copy of 4096 B."""
    ev = []
    for i in range(n):
        t = t0 + 100 * i
        c = corr0 + i
        ev += [{"ph": "X", "cat": "user_annotation", "name": "pooler n=2 rid=a,b", "pid": pid, "tid": tid,
                "ts": f"{t:.3f}", "dur": "50.000"},
               {"ph": "X", "cat": "user_annotation", "name": "transfer", "pid": pid, "tid": tid,
                "ts": f"{t + 1:.3f}", "dur": "10.000"},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": pid, "tid": tid,
                "ts": f"{t + 2:.3f}", "dur": "3.000", "args": {"correlation": c}},
               {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7,
                "ts": f"{t + 4:.3f}", "dur": "1.000", "args": {"correlation": c, "bytes": 4096, "device": 0,
                                                               "stream": 7}}]
    return ev


def write(path: Path, doc, gz=False):
    text = json.dumps(doc, indent=1)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def one_line_error(*args):
    p = run_main("analyze", *args)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("clef-prof: error")]
    assert len(lines) == 1 and "Traceback" not in p.stderr
    return lines[0]


def test_handmade_trace_reads(tmp_path):
    path = write(tmp_path / "t.json", trace(batch_events()))
    r = analyze(resolve(str(path))[0]).result
    assert (r.requests, r.batches) == (6, 3)
    assert (r.stages["transfer"].cuda.h2d_copies, r.stages["transfer"].cuda.h2d_bytes) == (3, 3 * 4096)
    assert r.stages["transfer"].host_ns_total == 3 * 10_000
    assert not [w for w in r.warnings if "user_annotation" in w or "CUDA runtime" in w]


def test_copy_without_bytes_arg_counts_as_a_copy_of_no_bytes(tmp_path):
    """A gpu_memcpy event without its bytes arg (the trace does not say how much it copied): still
    one H2D copy, adding no bytes to the other copies' 4096 B each."""
    ev = batch_events(n=3)
    del next(e for e in ev if e["cat"] == "gpu_memcpy")["args"]["bytes"]
    r = analyze(resolve(str(write(tmp_path / "nobytes.json", trace(ev))))[0]).result
    assert (r.totals.h2d_copies, r.totals.h2d_bytes, r.totals.h2d_pinned) == (3, 2 * 4096, 3)


def test_copy_without_correlation_pairs_with_no_call(tmp_path):
    """A gpu_memcpy event without its correlation (and no flow to its call): a copy of the capture,
    of no stage (the runtime call of correlation 1 keeps its own copy only)."""
    ev = batch_events(n=3)                      # calls and copies of correlations 1, 2, 3
    del [e for e in ev if e["cat"] == "gpu_memcpy"][-1]["args"]["correlation"]
    r = analyze(resolve(str(write(tmp_path / "nocorr.json", trace(ev))))[0]).result
    assert (r.totals.h2d_copies, r.stages["transfer"].cuda.h2d_copies) == (3, 2)


def test_truncated_gzip(tmp_path):
    good = write(tmp_path / "g.json.gz", trace(batch_events()), gz=True)
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(good.read_bytes()[:-40])
    before = cut.read_bytes()
    line = one_line_error(cut)
    assert "truncated gzip" in line
    assert cut.read_bytes() == before


def test_json_array_cut_off(tmp_path):
    text = json.dumps(trace(batch_events()))
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.index('"transfer"') + 40])
    assert "cut off" in one_line_error(cut)
    arr = tmp_path / "arr.json"          # the Chrome array format, cut inside an event
    t = json.dumps(batch_events())
    arr.write_text(t[: len(t) // 2])
    assert "cut off" in one_line_error(arr)


def test_missing_ts_and_negative_dur_warn_and_fail_strict(tmp_path):
    ev = batch_events()
    del ev[0]["ts"]                              # a batch range without ts
    ev[5]["dur"] = "-10.000"                     # a stage range that ends before it starts
    path = write(tmp_path / "bad.json", trace(ev))
    r = analyze(resolve(str(path))[0]).result
    assert any("have no ts" in w for w in r.warnings)
    assert any("end before they start" in w for w in r.warnings)
    assert r.batches == 2
    assert run_main("analyze", "--strict", path).returncode == 2


def test_duplicated_correlation_ids(tmp_path):
    ev = batch_events(n=3)
    for e in ev:
        if "args" in e and "correlation" in e["args"]:
            e["args"]["correlation"] = 1             # every call and copy says correlation 1
    r = analyze(resolve(str(write(tmp_path / "dup.json", trace(ev))))[0]).result
    assert any("repeat the (process, correlation)" in w for w in r.warnings)
    assert run_main("analyze", "--strict", tmp_path / "dup.json").returncode == 2


def test_two_runs_in_one_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "rank0.pt.trace.json.gz", trace(batch_events()), gz=True)
    write(folder / "rank1.pt.trace.json.gz", trace(batch_events(t0=10_000_000.0)), gz=True)
    assert "different runs" in one_line_error(folder)


def test_folder_of_ranks_reads_as_one_capture(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "rank0.pt.trace.json.gz", trace(batch_events(pid=10, tid=11)), gz=True)
    write(folder / "rank1.pt.trace.json.gz", trace(batch_events(pid=20, tid=21, t0=1020.0)), gz=True)
    r = analyze(resolve(str(folder))[0]).result
    assert r.capture.source["files"] == 2
    assert r.totals.h2d_copies == 6


def test_cuda_on_threads_without_ranges_warns(tmp_path):
    ev = batch_events()
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 99,
            "ts": f"{1005 + i:.3f}", "dur": "1.000", "args": {"correlation": 100 + i}} for i in range(4)]
    r = analyze(resolve(str(write(tmp_path / "thr.json", trace(ev))))[0]).result
    assert any("threads with no user_annotation range" in w and "profile_all_threads" in w for w in r.warnings)


def test_not_a_trace_and_manifest_json_still_a_manifest(tmp_path):
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"export": "missing.sqlite"}))
    assert "does not exist" in one_line_error(m)
    empty = write(tmp_path / "e.json", trace([]))
    assert "no user_annotation, CUDA runtime or GPU event" in one_line_error(empty)


def test_ns_from_decimal_text():
    assert kineto._ns("1234.567") == 1_234_567
    assert kineto._ns("1234.5") == 1_234_500
    assert kineto._ns(1234) == 1_234_000
    assert kineto._ns("5286146034824.987") == 5_286_146_034_824_987
    assert kineto._ns("-10.000") == -10_000
    assert kineto._ns("1.0005") == 1_001
    assert kineto._ns(None) is None and kineto._ns(True) is None


def test_conversion_is_cached_and_input_untouched(tmp_path):
    path = write(tmp_path / "t.json", trace(batch_events()))
    before = path.read_bytes()
    a = kineto.to_export(str(path), quiet=True)
    b = kineto.to_export(str(path), quiet=True)
    assert a == b and path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["t.json"]


def test_a_trace_edited_under_its_old_mtime_is_read_anew(tmp_path):
    """Edited in place to the same size (a batch of 2 requests made 3) and given its old mtime back
    (cp -p, rsync -a, tar): the cached conversion is not the trace's any more, and is not used."""
    path = write(tmp_path / "t.json", trace(batch_events()))
    st = path.stat()
    assert analyze(kineto.to_export(str(path), quiet=True)).result.requests == 6
    path.write_text(path.read_text().replace('"pooler n=2 rid=a,b"', '"pooler n=3 rid=a,b"', 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert analyze(kineto.to_export(str(path), quiet=True)).result.requests == 7


def test_kineto_error_is_capture_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"traceEvents": [ {"ph": "X", ')
    with pytest.raises(CaptureError):
        kineto.to_export(str(bad), quiet=True)


def test_report_and_compare_accept_traces(real, tmp_path):
    html = tmp_path / "r.html"
    p = run_main("report", real["pr"][0], "--html", html)
    assert p.returncode == 0, p.stderr
    assert html.stat().st_size > 0
    # main vs pr from torch traces: the H2D change is exact (9 -> 3 per request, same bytes)
    p = run_main("compare", "--format", "json", "--arm", f"main={real['main'][0]}", "--arm", f"pr={real['pr'][0]}")
    assert p.returncode == 0, p.stderr
    m = {x["metric"]: x for x in json.loads(p.stdout)["metrics"]}
    h2d = m["per_request.h2d_copies"]
    assert (h2d["arms"]["main"]["mean"], h2d["arms"]["pr"]["mean"]) == (9, 3)
    assert m["per_request.h2d_bytes"]["arms"]["main"]["mean"] == m["per_request.h2d_bytes"]["arms"]["pr"]["mean"] == 3424


@pytest.mark.parametrize("field, value", [("ts", float("nan")), ("dur", float("inf")), ("dur", 1e300),
                                          ("dur", 10 ** 30), ("ts", "1e400"), ("ts", "nan")])
def test_times_that_are_no_number_of_microseconds(tmp_path, field, value):
    """NaN, Infinity (Python's JSON reads them), or a time beyond int64 ns: the event is left out
    with the damaged-trace warning, as one without the field is, and --strict fails."""
    ev = batch_events(n=3)
    ev[1][field] = value                         # the first batch's transfer range
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace(ev), allow_nan=True))
    r = analyze(resolve(str(path))[0]).result
    assert any(f"have no {field} (or one that is no finite number" in w for w in r.warnings), r.warnings
    assert (r.batches, r.stages["transfer"].instances) == (3, 2)
    assert run_main("analyze", "--strict", path).returncode == 2


def test_ids_and_sizes_beyond_int64(tmp_path):
    """A copy's bytes or correlation of 2**70 (no size or id an int64 column holds) is read as
    missing, as an absent arg is: the copy counts, with no bytes or no call to pair with."""
    ev = batch_events(n=3)
    copies = [e for e in ev if e["cat"] == "gpu_memcpy"]
    copies[0]["args"]["bytes"] = 2 ** 70
    copies[1]["args"]["correlation"] = 2 ** 70
    r = analyze(resolve(str(write(tmp_path / "big.json", trace(ev))))[0]).result
    assert (r.totals.h2d_copies, r.totals.h2d_bytes, r.stages["transfer"].cuda.h2d_copies) == (3, 2 * 4096, 2)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_json_nested_beyond_the_decoder(tmp_path, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert "JSON nested too deeply" in one_line_error(path)


@pytest.mark.parametrize("field, value", [("pid", "abc"), ("tid", 1.5), ("name", ["transfer"])])
def test_a_range_of_no_thread_or_name_is_said_to_be_left_out(tmp_path, field, value):
    """A user_annotation event whose pid or tid is no integer, or whose name is no string, belongs
    to no thread and names no stage: left out, with a damaged-trace warning (it was dropped
    silently, the stage one instance short)."""
    ev = batch_events(n=3)
    ev[1][field] = value                         # the first batch's transfer range
    r = analyze(resolve(str(write(tmp_path / "t.json", trace(ev))))[0]).result
    assert r.stages["transfer"].instances == 2
    assert "1 user_annotation or CUDA runtime events have no integer pid and tid, or no name: a damaged trace; " \
           "they are left out" in r.warnings


def test_copies_with_bad_bytes_arg_count_as_unknown_bytes(real, tmp_path):
    """A real trace whose first five H2D copies' bytes arg is missing, null, text, a float and
    beyond 2^63: still copies, their bytes unknown with a warning that --strict fails on (never a
    silent 0); the other copies' bytes summed exactly as json.load counts them."""
    doc = json.load(gzip.open(real["main"][0]))
    h2d = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy HtoD")]
    valid = sum(e["args"]["bytes"] for e in h2d[5:])
    del h2d[0]["args"]["bytes"]
    for e, bad in zip(h2d[1:5], (None, "4096", 4096.0, 1 << 64)):
        e["args"]["bytes"] = bad
    path = write(tmp_path / "badbytes.json", doc)
    r = analyze(resolve(str(path))[0]).result
    assert (r.totals.h2d_copies, r.totals.h2d_bytes) == (len(h2d), valid)
    assert any(w.startswith("5 gpu_memcpy events have no valid 'bytes' arg") for w in r.warnings)
    assert run_main("analyze", "--strict", path).returncode == 2


@pytest.mark.parametrize("damage", ["cut", "garbage", "other sqlite", "folder"])
def test_a_damaged_cached_conversion_is_made_anew(real, tmp_path, damage):
    """A cached conversion cut short (a full disk, a copied cache), overwritten, another program's
    SQLite file under its name, or a folder there: the trace is converted again (or, where the
    name cannot be replaced, into a temporary folder, said in one line) and gives the figures
    the trace's own JSON gives, never an error about the cache."""
    import sqlite3

    path, truth = real["main"]
    before = path.read_bytes()
    out = Path(kineto.to_export(str(path), quiet=True))
    want = oracle(path)["h2d_copies"]
    assert want == 9 * truth["server_counts"]["requests"]
    if damage == "cut":
        with open(out, "r+b") as fh:
            fh.truncate(out.stat().st_size - 4096)
    elif damage == "garbage":
        out.write_bytes(b"\0" * 8192)
    elif damage == "other sqlite":
        out.unlink()
        sqlite3.connect(out).execute("CREATE TABLE t (x)").connection.close()
    else:
        out.unlink()
        out.mkdir()
    p = run_main("analyze", "--format", "json", path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["totals"]["h2d_copies"] == want
    assert path.read_bytes() == before
    if damage == "folder":
        assert "cannot be written" in p.stderr and out.is_dir()
    else:
        assert "cannot be written" not in p.stderr and kineto._whole(str(out))


def test_an_unwritable_cache_folder_falls_back_to_a_temporary_one(real, tmp_path):
    """XDG_CACHE_HOME naming a file (no folder can be made under it; root ignores mode bits, a
    file stops it too): analyze says so in one line, converts into a temporary folder, gives the
    trace's figures and removes that folder when it exits."""
    path, truth = real["main"]
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    env = {**os.environ, "XDG_CACHE_HOME": str(blocker)}
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", "--format", "json", str(path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    said = [ln for ln in p.stderr.splitlines() if "cannot be written" in ln]
    assert len(said) == 1 and str(blocker) in said[0], p.stderr
    assert json.loads(p.stdout)["totals"]["h2d_copies"] == 9 * truth["server_counts"]["requests"]
    made = [ln.rsplit(" into ", 1)[1] for ln in p.stderr.splitlines() if " into " in ln]
    assert made and not os.path.exists(os.path.dirname(made[0]))
    assert blocker.read_text() == "x"


def test_xz_traces_read_as_tests_data_ships_them(real, tmp_path):
    """A `.pt.trace.json.xz` (tests/data's own files, read where they lie: never written) and a
    folder of them read as the .json.gz of the same trace does; an xz file cut short or not xz
    is one line."""
    src = DATA / "kineto-demo-main.pt.trace.json.xz"
    before = src.read_bytes()
    gz, truth = real["main"]
    want = json.loads(run_main("analyze", "--format", "json", gz).stdout)["totals"]
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copy(src, folder / src.name)
    for arg in (src, folder):
        p = run_main("analyze", "--format", "json", arg)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)["totals"]
        assert got == want and got["h2d_copies"] == oracle(gz)["h2d_copies"] == 9 * truth["server_counts"]["requests"]
    assert src.read_bytes() == before
    (tmp_path / "cut.json.xz").write_bytes(before[: len(before) // 2])
    assert "truncated xz" in one_line_error(tmp_path / "cut.json.xz")
    (tmp_path / "bad.json.xz").write_bytes(before[:64] + b"\0" * 4096)
    assert "not a readable xz file" in one_line_error(tmp_path / "bad.json.xz")
