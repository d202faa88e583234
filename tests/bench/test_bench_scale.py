"""benchmarks/: a K-times tiling of a real export analyzes to exactly K times its counts, stays valid
input for `nsys stats`, and the benchmark runs end to end on a small tiling (no timing asserted)."""
from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.base import cupti
from clef_prof.analyze.pipeline import analyze

ROOT = Path(__file__).resolve().parents[2]
NSYS = ROOT / ".nsys" / "2023.4" / "nsys"
TILES = 3
# requests, batches, h2d copies, h2d bytes, head kernel launches, graph launches, d2h copies
MAIN = (1520, 282, 13680, 5_204_480, 22800, 1520, 282)


def _scale_export():
    spec = importlib.util.spec_from_file_location("scale_export", ROOT / "benchmarks" / "scale_export.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiled(capture, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / f"main-x{TILES}.sqlite"
    _scale_export().scale(str(capture("gpu-q1c16-main")), str(out), tiles=TILES, quiet=True)
    return out


def _counts(path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    out = {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    out["nvtx_domains"] = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 75").fetchone()[0]
    out["schema"] = con.execute("SELECT group_concat(sql, ';') FROM sqlite_master").fetchone()[0]
    out["duration"] = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0]
    out["max_corr"] = con.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    # rows the session's end cuts (in flight when capture stopped), and rows past the session
    for t in ("OSRT_API", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
        out[t + ":cut"], out[t + ":outside"] = con.execute(
            f'SELECT count(*) FILTER (WHERE "end" >= {out["duration"]}), count(*) FILTER (WHERE start > '
            f'{out["duration"]}) FROM "{t}"').fetchone()
    return out


def test_tiling_multiplies_event_rows_only(capture, tiled):
    src, out = _counts(capture("gpu-q1c16-main")), _counts(tiled)
    assert out["schema"] == src["schema"]
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API"):
        # domain rows once; a row the session's end cuts once, at the tiled session's end
        once = (src["nvtx_domains"] if t == "NVTX_EVENTS" else 0) + src.get(t + ":cut", 0)
        assert out[t] == TILES * (src[t] - once) + once, t
    for t in ("StringIds", "ThreadNames", "PROCESSES", "META_DATA_EXPORT", "META_DATA_CAPTURE", "OSRT_CALLCHAINS",
              "TARGET_INFO_GPU", "ANALYSIS_DETAILS"):
        assert out[t] == src[t], t
    assert out["nvtx_domains"] == src["nvtx_domains"]
    # the copies lie back to back inside the session: it is K times the source's, nothing starts
    # after it, and only the rows the source's end cut are cut by the tiling's
    assert out["duration"] == TILES * src["duration"]
    assert src["OSRT_API:cut"] >= 1
    for t in ("OSRT_API", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
        assert out[t + ":outside"] == src[t + ":outside"] == 0, t
        assert out[t + ":cut"] == src[t + ":cut"], t
    assert out["max_corr"] > (TILES - 1) * src["max_corr"]


def test_analyze_of_a_tiling_is_k_times_the_source(capture, tiled):
    src = analyze(str(capture("gpu-q1c16-main"))).result
    r = analyze(str(tiled)).result
    req, batches, h2d, h2d_bytes, launches, graphs, d2h = (TILES * v for v in MAIN)
    assert (r.requests, r.batches) == (req, batches)
    assert r.totals.h2d_copies == r.stages["transfer"].cuda.h2d_copies == h2d
    assert r.totals.h2d_bytes == h2d_bytes
    assert r.stages["head"].cuda.kernel_launches == launches
    assert r.stages["head"].cuda.graph_launches == graphs
    assert r.totals.d2h_copies == d2h
    assert r.warnings == cupti.check("2023.4.4.54", 13000) and r.excluded.cut_at_edges == {}
    for key in ("gpu_kernels", "memcpy_calls", "sync_calls", "memset_calls"):
        assert getattr(r.totals, key) == TILES * getattr(src.totals, key), key
    for stage, block in src.stages.items():
        assert r.stages[stage].instances == TILES * block.instances
        assert r.stages[stage].host_ns_total == TILES * block.host_ns_total
    assert r.per_request.to_json() == pytest.approx(src.per_request.to_json(), rel=1e-12)
    assert r.overlap.gpu_busy_fraction_of_pooler_span == pytest.approx(
        src.overlap.gpu_busy_fraction_of_pooler_span, rel=1e-12)
    assert r.capture.threads[0].batches == batches


@pytest.mark.nsys("2023.4")
def test_nsys_stats_reads_the_tiling(tiled):
    p = subprocess.run([str(NSYS), "stats", "-r", "cuda_gpu_trace", "-f", "csv", "-o", "-", str(tiled)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line for line in p.stdout.splitlines() if line and line[0].isdigit()]
    assert len(rows) == TILES * (22800 + 13962)      # every kernel and memcpy row of every tile


@pytest.mark.nsys("2023.4")
def test_benchmark_smoke_run(capture, tmp_path):
    """The CI run of benchmarks/bench_analyze.py: a 4x tiling (~75 MB), one run each (nsys stats too),
    no timing."""
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_analyze.py"), "--source",
                        str(capture("gpu-q1c16-main")), "--tiles", "4", "--repeat", "1", "--workdir", str(tmp_path),
                        "--json", str(out), "--tree", f"this={ROOT}", "--tree", f"again={ROOT}"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    (rec,) = doc["results"]
    assert rec["bytes"] <= 100e6
    assert rec["analyze"]["requests"] == 4 * MAIN[0] and rec["analyze"]["warnings"] == 1     # nsys 2023.4 on CUDA 13
    assert rec["a_scan"]["rows"] > 0 and rec["b"]["wall_s"] > 0 and rec["b"]["rss_mb"] > 0
    # the two-thread floor reads every row the one-thread floor reads, in the same round
    assert rec["a_scan2"]["rows"] == rec["a_scan"]["rows"] and rec["a_scan2"]["runs"] == 1
    # two trees: each timed in the round, a row each; b is the first's
    assert list(rec["trees"]) == ["this", "again"] and rec["b"] == rec["trees"]["this"]
    assert len(rec["b_over_a_rounds"]) == 1 and len(rec["load"]) == 2
    assert "MB this |" in p.stdout and "MB again |" in p.stdout
    assert rec["c"] is not None
    assert "| export |" in p.stdout
    assert not any(f.suffix == ".sqlite" for f in tmp_path.iterdir())    # the tiling was deleted


def test_compare_memory_benchmark_smoke_run(tmp_path):
    """benchmarks/bench_compare_mem.py end to end on the two slices in traces/, once each (no figure
    asserted but what must hold whatever the load: every command ran, the compare on worker
    processes ran in more processes than the others, and one process's tree is itself)."""
    out = tmp_path / "mem.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_compare_mem.py"),
                        str(ROOT / "traces" / "gpu-main-slice.sqlite"), str(ROOT / "traces" / "gpu-pr-slice.sqlite"),
                        "--repeat", "1", "--jobs", "1,2", "--pools", "threads,processes", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert list(s) == ["analyze A", "analyze B", "compare --jobs 1", "compare --jobs 2, threads",
                       "compare --jobs 2, processes"]
    assert all(r["runs"] == 1 and r["wall_s"] > 0 and r["largest_mb"] > 10 for r in s.values())
    for one in ("compare --jobs 1", "compare --jobs 2, threads"):
        assert s[one]["processes"] == 1 and s[one]["tree_mb"] == s[one]["largest_mb"]
    assert s["compare --jobs 2, processes"]["processes"] >= 3          # the command, the forkserver, workers
    assert "| `compare --jobs 2, processes` |" in p.stdout


@pytest.mark.native
def test_readers_benchmark_smoke_run(capture, tmp_path):
    """benchmarks/bench_readers.py end to end on a real capture, one round (no timing asserted): the
    queries are the ones analyze streams, and every reader reads the same rows: all the kernel
    and memcpy rows, and the API calls of interest among the runtime rows."""
    from conftest import sql

    path = capture("gpu-q1c16-main")
    out = tmp_path / "readers.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_readers.py"), str(path), "--repeat", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    gpu = sum(sql(path, f"SELECT count(*) FROM {t}")[0][0] for t in ("CUPTI_ACTIVITY_KIND_KERNEL",
                                                                      "CUPTI_ACTIVITY_KIND_MEMCPY"))
    runtime = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    assert set(doc["thread_cpu_s"]) == {"floor", "native", "adbc", "sqlite"}
    assert len(set(doc["rows"].values())) == 1 and gpu < doc["rows"]["floor"] < gpu + runtime
    assert all(len(v) == 1 for v in doc["thread_cpu_s"].values())
    assert "| native |" in p.stdout and "| floor |" in p.stdout
