"""Stage ranges outside every batch range (issue 11 item 2), on a real CPU recording (nsys 2023.4).

The main thread runs a warm-up batch, then `encode` stages outside any batch while a batcher
thread runs batches; a spawned worker runs its own batch, then its own `encode` stages. Every
count below is checked against an SQL query of the export.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clef_prof.analyze.pipeline import analyze
from recording import record

pytestmark = pytest.mark.nsys("2023.4")

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = f"""
import sys, threading, time, multiprocessing as mp
sys.path.insert(0, {str(ROOT)!r})
import clef_prof

def pool(n):
    with clef_prof.batch(n=n):
        for s in ("parse", "index", "transfer", "head"):
            with clef_prof.stage(s):
                time.sleep(0.002)

def encode(k):
    for _ in range(k):
        with clef_prof.stage("encode"):
            time.sleep(0.003)

def worker():
    pool(3)
    encode(4)

if __name__ == "__main__":
    pool(2)                                   # warm-up batch on the main thread
    t = threading.Thread(target=lambda: [pool(4) for _ in range(5)], name="batcher")
    t.start()
    encode(6)                                 # the front end encodes, outside every batch
    t.join()
    p = mp.get_context("spawn").Process(target=worker, name="encoder")
    p.start()
    p.join()
"""

# clef ranges with their names (registered strings or ASCII text) and threads
RANGES = """
WITH dom AS (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'clef'),
r AS (SELECT n.start, n."end", n.globalTid AS g, COALESCE(s.value, n.text) AS name FROM NVTX_EVENTS n
      LEFT JOIN StringIds s ON s.id = n.textId
      WHERE n.eventType IN (59, 60) AND n.domainId IN (SELECT domainId FROM dom))
"""


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    return record(PROGRAM, tmp_path_factory.mktemp("outside"))


def sql(cap, query):
    con = sqlite3.connect(f"file:{cap}?mode=ro", uri=True)
    try:
        return con.execute(RANGES + query).fetchall()
    finally:
        con.close()


def test_stages_outside_the_batch_are_counted_and_placed(cap):
    r = analyze(str(cap)).result
    (batches, requests), = sql(cap, "SELECT count(*), sum(CAST(substr(name, 10) AS INTEGER)) FROM r "
                                    "WHERE name LIKE 'pooler n=%'")
    assert (r.batches, r.requests) == (batches, requests) == (7, 25)
    loose = sql(cap, "SELECT g >> 24 & 16777215, g & 16777215, count(*), sum(\"end\" - start) FROM r e "
                     "WHERE name = 'encode' AND NOT EXISTS (SELECT 1 FROM r b WHERE b.name LIKE 'pooler%' "
                     "AND b.g = e.g AND b.start <= e.start AND e.\"end\" <= b.\"end\") GROUP BY g ORDER BY g")
    # one thread per process holds them, and that thread also holds a batch (warm-up, worker's own)
    assert sorted(n for *_, n, _ in loose) == [4, 6] and len({p for p, *_ in loose}) == 2
    enc = r.stages["encode"]
    assert enc.instances == enc.outside_batch_instances == 10
    total_ns = sum(ns for *_, ns in loose)
    assert enc.host_ns_total == total_ns
    assert enc.host_ms_per_request == pytest.approx(total_ns / 1e6 / requests)
    assert enc.outside_batch_host_ms_per_request == pytest.approx(total_ns / 1e6 / requests)
    assert r.excluded.cut_at_edges == {} and not any("cut at the capture" in w for w in r.warnings)
    (parse,), = sql(cap, "SELECT count(*) FROM r WHERE name = 'parse'")
    assert r.stages["parse"].instances == parse == 7 and r.stages["parse"].outside_batch_instances == 0
    # which process and thread: the JSON threads carry them
    where = {(t.pid, t.tid): t for t in r.capture.threads}
    for pid, tid, n, _ in loose:
        t = where[(pid, tid)]
        assert t.outside_batch_instances == {"encode": n} and t.batches >= 1
    assert r.excluded.outside_batch_instances == 10


def test_outside_batch_is_said_in_the_table(cap):
    from clef_prof.explore.text import render_markdown

    md = render_markdown(analyze(str(cap)).result)
    lines = [ln for ln in md.splitlines() if "outside every 'pooler' range" in ln]
    assert sorted(ln.split("encode ")[1].split()[0] for ln in lines) == ["4", "6"]
