"""Two batches in flight at once (tests/programs/concurrent_batches.py: two executor threads, a
barrier before each batch, on a GPU one CUDA stream each).

Per capture, GPU busy in the pooler span is measured within the union of the batch spans of each
process (GPU time under two batches counts once); summed per batch it counts twice. Both are held
against SQL over the export (gaps-and-islands with window functions, an oracle apart from the
NumPy code): on the H200 capture (tests/data/gpu25-concurrent, truth file made by `truth_sql`
below), and the per-request counts on a capture recorded here on the CPU with nsys 2023.4."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from clef_prof.analyze.pipeline import analyze
from conftest import sql

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
GPU = "gpu25-concurrent"

# batch ranges of domain `clef` (registered strings or ASCII text), with the size in `n=K`
BATCHES = """
    b AS (SELECT e.start AS s, e."end" AS e, e.globalTid AS tid, e.globalTid >> 24 AS pid,
                 CAST(substr(COALESCE(e.text, st.value), 10) AS INTEGER) AS n
          FROM NVTX_EVENTS e LEFT JOIN StringIds st ON st.id = e.textId
          WHERE e.eventType IN (59, 60) AND COALESCE(e.text, st.value) LIKE 'pooler n=%'
            AND e.domainId = (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'clef'))
"""


def islands(src: str, name: str) -> str:
    """A CTE `name`(pid, s, e): the union of the intervals of `src`(pid, s, e) per pid."""
    return f"""
    {name}_o AS (SELECT pid, s, e, MAX(e) OVER (PARTITION BY pid ORDER BY s, e
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev FROM {src}),
    {name}_g AS (SELECT pid, s, e, SUM(CASE WHEN prev IS NULL OR s > prev THEN 1 ELSE 0 END)
                  OVER (PARTITION BY pid ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp FROM {name}_o),
    {name} AS (SELECT pid, MIN(s) AS s, MAX(e) AS e FROM {name}_g GROUP BY pid, grp)"""


GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def gpu_rows(path) -> str:
    """A CTE `gpu`(pid, s, e): the kernel, memcpy and memset rows the export holds."""
    have = {n for (n,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    parts = [f'SELECT globalPid >> 24 AS pid, start AS s, "end" AS e FROM {t}' for t in GPU_TABLES if t in have]
    return f"gpu AS ({' UNION ALL '.join(parts) or 'SELECT 0 AS pid, 0 AS s, 0 AS e WHERE 0'})"



def truth_sql(path) -> dict:
    """The figures of a capture by SQL alone (ns): requests and batches, the union of the batch
    spans, the GPU busy time (union of kernel, memcpy and memset rows) in all, within that union,
    and summed over the batch spans one by one, and the ns during which two batches overlap."""
    with_ = "WITH " + ",".join([BATCHES, gpu_rows(path), islands("b", "bu"), islands("gpu", "gu")])
    (req, n_b, total), = sql(path, with_ + " SELECT sum(n), count(*), sum(e - s) FROM b")
    (union,), = sql(path, with_ + " SELECT sum(e - s) FROM bu")
    (busy,), = sql(path, with_ + " SELECT COALESCE(sum(e - s), 0) FROM gu")
    inter = """SELECT COALESCE(sum(MIN(x.e, gu.e) - MAX(x.s, gu.s)), 0) FROM {} x
               JOIN gu ON gu.pid = x.pid AND gu.s < x.e AND gu.e > x.s"""
    (in_union,), = sql(path, with_ + " " + inter.format("bu"))
    (in_batches,), = sql(path, with_ + " " + inter.format("b"))
    (overlap,), = sql(path, with_ + """ SELECT COALESCE(sum(MIN(x.e, y.e) - MAX(x.s, y.s)), 0) FROM b x
                      JOIN b y ON y.pid = x.pid AND y.tid <> x.tid AND x.tid < y.tid AND y.s < x.e AND y.e > x.s""")
    return {"requests": req, "batches": n_b, "batch_spans_ns": total, "span_union_ns": union, "gpu_busy_ns": busy,
            "gpu_busy_in_span_union_ns": in_union, "gpu_busy_in_batch_spans_ns": in_batches,
            "batches_overlap_ns": overlap}


def test_gpu_busy_in_the_span_counts_concurrent_batches_once(capture, truth):
    path = capture(GPU)
    t = truth(GPU)
    assert truth_sql(path) == t["sql"]                       # the truth file is what SQL says of this export
    s = t["sql"]
    facts = t["program"]
    assert s["requests"] == sum(sum(th["sizes"]) for th in facts["threads"]) == 120
    assert s["batches"] == sum(len(th["sizes"]) for th in facts["threads"]) == 48
    # the shape under test: the two threads' batches overlap, and the per-batch sum of GPU busy in
    # the spans exceeds all GPU busy of the capture (each instant under two batches counts twice)
    assert s["batches_overlap_ns"] > 0.2 * s["span_union_ns"]
    assert s["gpu_busy_in_batch_spans_ns"] > s["gpu_busy_ns"] >= s["gpu_busy_in_span_union_ns"] > 0
    r = analyze(str(path)).result
    req = r.requests
    assert (req, r.batches) == (s["requests"], s["batches"])
    ov = r.overlap
    assert ov.gpu_busy_ms_in_pooler_span_per_request == pytest.approx(s["gpu_busy_in_span_union_ns"] / 1e6 / req,
                                                                      rel=1e-12)
    assert ov.gpu_busy_fraction_of_pooler_span == pytest.approx(s["gpu_busy_in_span_union_ns"] / s["span_union_ns"],
                                                                rel=1e-12)
    assert ov.gpu_busy_ms_in_batch_spans_per_request == pytest.approx(s["gpu_busy_in_batch_spans_ns"] / 1e6 / req,
                                                                      rel=1e-12)
    assert ov.gpu_busy_fraction_of_batch_spans == pytest.approx(s["gpu_busy_in_batch_spans_ns"] / s["batch_spans_ns"],
                                                                rel=1e-12)
    # per capture, GPU busy in the span never exceeds all GPU busy of the staged work
    assert ov.gpu_busy_ms_in_pooler_span_per_request <= ov.gpu_busy_ms_per_request
    assert r.pooler.span_union_ms_total == pytest.approx(s["span_union_ns"] / 1e6, rel=1e-12)
    assert r.pooler.host_ms_total == pytest.approx(s["batch_spans_ns"] / 1e6, rel=1e-12)
    assert [k.gpu_busy_fraction_of_pooler_span for k in r.ranks] == [ov.gpu_busy_fraction_of_pooler_span]
    # per batch, the stream's copies and kernels are the program's: one H2D, one D2H each
    assert r.pooler.cuda.h2d_copies == r.pooler.cuda.d2h_copies == s["batches"]
    assert r.excluded.nested_batch_ranges == 0 and r.excluded.outside_batch_instances == 0


def clean_env() -> dict:
    """This environment without clef-prof's variables, with the checkout on the path (the
    program imports clef_prof for its annotations)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    return {**env, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory):
    from recording import profile

    tmp = tmp_path_factory.mktemp("concurrent")
    facts = tmp / "facts.json"
    sqlite = profile([sys.executable, "concurrent_batches.py", "--device", "cpu", "--rounds", "8", "--out", facts],
                     tmp / "cc", "2023.4", clean_env(), PROGRAMS)
    return sqlite, json.loads(facts.read_text())


@pytest.mark.nsys("2023.4")
def test_counts_are_exact_with_two_batches_in_flight(cpu_capture):
    path, facts = cpu_capture
    s = truth_sql(path)
    r = analyze(str(path)).result
    threads = {th["native_id"]: th["sizes"] for th in facts["threads"]}
    assert s["batches_overlap_ns"] > 0                      # the batches do run at the same time
    assert r.batches == s["batches"] == sum(len(v) for v in threads.values()) == 16
    assert r.requests == s["requests"] == sum(sum(v) for v in threads.values()) == 40
    assert r.pooler.host_ms_total == pytest.approx(s["batch_spans_ns"] / 1e6, rel=1e-12)
    assert r.pooler.span_union_ms_total == pytest.approx(s["span_union_ns"] / 1e6, rel=1e-12)
    assert r.pooler.span_union_ms_total < r.pooler.host_ms_total
    # every stage instance in the batch of its own thread, none outside, none counted twice
    by_tid = {t.tid: t for t in r.capture.threads}
    assert set(by_tid) == set(threads)
    for tid, sizes in threads.items():
        assert by_tid[tid].batches == len(sizes)
        assert by_tid[tid].stage_instances == {st: len(sizes) for st in ("parse", "transfer", "head", "encode")}
    for st in ("parse", "transfer", "head", "encode"):
        assert r.stages[st].instances == 16 and r.stages[st].outside_batch_instances == 0
    assert r.excluded.nested_batch_ranges == 0 and not r.excluded.cut_at_edges
    assert not [w for w in r.warnings if "nested" in w or "inside another batch" in w]
