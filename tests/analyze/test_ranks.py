"""Ranks that run the same batches (issue 11 item 5), on real CPU recordings (nsys 2023.4).

Two spawned workers run batches in step, as tensor-parallel ranks do (a barrier before each
batch): with request ids in the message, and without (same sizes at the same time). Counted
once, with per-rank figures. Two workers running different batches in step (data parallel) stay apart.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clef_prof.analyze.pipeline import analyze
from recording import record

pytestmark = pytest.mark.nsys("2023.4")

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = """
import sys, time, multiprocessing as mp
sys.path.insert(0, {root!r})
import clef_prof

SIZES = (3, 1, 4, 2, 5, 2)

def worker(rank, barrier, tp, ids):
    # NVTX starts up (nsys' injection loads) at the first stage, not between a barrier and a
    # batch: under load that took one rank 12 ms, and its first batch no longer overlapped
    stages = [clef_prof.stage(s) for s in ("parse", "head")]
    for i, n in enumerate(SIZES if tp else SIZES[rank::2]):
        barrier.wait()
        tag = "" if tp else f"w{{rank}}"
        rids = [f"r{{tag}}{{i}}-{{k}}" for k in range(n)] if ids else None
        with clef_prof.batch(n=n, request_ids=rids):
            for s in stages:
                with s:
                    time.sleep(0.004 + 0.001 * n)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    tp, ids = {tp}, {ids}
    barrier = ctx.Barrier(2)                  # in step either way: data parallel overlaps in time too
    ps = [ctx.Process(target=worker, args=(r, barrier, tp, ids)) for r in range(2)]
    [p.start() for p in ps]
    [p.join() for p in ps]
"""

BATCHES = """
SELECT n.globalTid >> 24 & 16777215 AS pid, count(*), sum(CAST(substr(n.text, 10, 1) AS INTEGER)),
       group_concat(substr(n.text, 10, 1), '') FROM NVTX_EVENTS n
WHERE n.eventType IN (59, 60) AND n.text LIKE 'pooler n=%' GROUP BY pid ORDER BY pid
"""


def per_process(cap):
    con = sqlite3.connect(f"file:{cap}?mode=ro", uri=True)
    try:
        return con.execute(BATCHES).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("ranks")


@pytest.mark.parametrize("ids", [True, False], ids=["rid", "sizes"])
def test_tensor_parallel_ranks_count_once(out, ids):
    cap = record(PROGRAM.format(root=str(ROOT), tp=True, ids=ids), out / f"tp-{ids}")
    rows = per_process(cap)
    assert len(rows) == 2 and rows[0][1:] == rows[1][1:] == (6, 17, "314252"), rows
    r = analyze(str(cap)).result
    first = rows[0][0]
    assert (r.batches, r.requests) == (6, 17)
    assert r.stages["head"].instances == 6
    by_pid = {x.pid: x for x in r.ranks}
    assert set(by_pid) == {pid for pid, *_ in rows}
    assert all(x.first_rank_pid == first and (x.batches, x.requests) == (6, 17) for x in by_pid.values())
    assert by_pid[first].counted and not by_pid[rows[1][0]].counted
    assert by_pid[first].gpu_busy_fraction_of_pooler_span is None       # CPU capture: no CUDA
    from clef_prof.explore.text import render_markdown
    assert f"pid {rows[1][0]} runs the same batches as pid {first}" in render_markdown(r)


def test_data_parallel_ranks_stay_apart(out):
    cap = record(PROGRAM.format(root=str(ROOT), tp=False, ids=True), out / "dp")
    rows = per_process(cap)
    assert sorted(row[1:] for row in rows) == [(3, 5, "122"), (3, 12, "345")], rows
    r = analyze(str(cap)).result
    assert (r.batches, r.requests) == (6, 17) == (sum(x[1] for x in rows), sum(x[2] for x in rows))
    assert all(x.counted and x.first_rank_pid == x.pid for x in r.ranks) and len(r.ranks) == 2
