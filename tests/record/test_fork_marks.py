"""A server that forks its workers after clef-prof's NVTX client and threads have started (a
pre-fork server, vLLM's `fork` multiprocessing), recorded as record runs nsys
(--trace-fork-before-exec). nsys starts each child's domains and registered strings afresh, so
the client creates and registers them again in the child (annotate.nvtx_client); the clock marks
and the Python sampler start again there (the fork copied no thread). Read from the export by
process: each child's batches and stages are in its own "clef" domain under their own names, its
clock marks carry the clock's message, its samples name its own threads; analyze counts every
process's batches."""
from __future__ import annotations

import json
import sqlite3

import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.annotate import sampler
from clef_prof.annotate.clock import DOMAIN as CLOCK_DOMAIN, PERIOD_S
from clef_prof.base.config import CLOCK_MARK_MESSAGE, ENV_CLOCK_MARKS, ENV_PY_SAMPLING_HZ, StageConfig
from recording import record

# the parent starts the client and its threads with its first range, then forks two workers;
# each process runs batches of one request (a parse stage in each) and writes how many it ran.
# The request ids tell the workers apart: two workers that run back-to-back batches of one
# request each, without ids, are what analyze takes for replica ranks (analyze.figures.ranks)
CHILD_S = 1.5
PROGRAM = f"""
    import json, os, sys, time
    import clef_prof

    def work(seconds):
        n, end = 0, time.time() + seconds
        while time.time() < end:
            with clef_prof.batch(n=1, request_ids=[f"{{os.getpid()}}-{{n}}"]), clef_prof.stage("parse"):
                sum(i * i for i in range(2000))
            n += 1
        return n

    done = work(0.6)
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            n = work({CHILD_S})
            with clef_prof.batch(n=1, request_ids=["last"]), clef_prof.stage("encode"):  # a new name
                n += 1
            json.dump(n, open(f"batches-{{os.getpid()}}.json", "w"))
            sys.exit(0)                 # os._exit would lose the child's last NVTX buffer
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    done += work(0.3)
    json.dump({{"parent": os.getpid(), "children": children, "batches": done}}, open("pids.json", "w"))
"""

# an event's domain is the create event of its domainId in its own process
BY_PROCESS = ("SELECT (e.globalTid >> 24) & 16777215 AS pid, COUNT(*), MIN(e.start), MAX(e.start) "
              "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
              "JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = e.domainId "
              "  AND (d.globalTid >> 24) = (e.globalTid >> 24) AND d.text = ? "
              "WHERE e.eventType = ? {where} GROUP BY pid")


def per_process(db, domain: str, event: int, where: str = "") -> dict[int, tuple[int, float]]:
    """pid -> (events, seconds from the first to the last) of one NVTX domain's events of a type."""
    rows = db.execute(BY_PROCESS.format(where=where), (domain, event)).fetchall()
    return {int(pid): (int(n), (last - first) / 1e9) for pid, n, first, last in rows}


def named(text: str) -> str:
    return f"AND COALESCE(e.text, s.value) = '{text}'"


@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.nsys(v)) for v in ("2023.4", "2022.4")])
def test_forked_workers_keep_their_domains_names_clock_and_samples(tmp_path, version):
    db_path = record(PROGRAM, tmp_path, version, env={ENV_CLOCK_MARKS: "1", ENV_PY_SAMPLING_HZ: "100"},
                     nsys_args=("--trace-fork-before-exec=true",))
    pids = json.loads((tmp_path / "pids.json").read_text())
    parent, children = pids["parent"], pids["children"]
    batches = {parent: pids["batches"], **{c: json.loads((tmp_path / f"batches-{c}.json").read_text())
                                          for c in children}}
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        clock = per_process(db, CLOCK_DOMAIN, 34, named(CLOCK_MARK_MESSAGE))
        samples = per_process(db, sampler.DOMAIN, 34, "AND COALESCE(e.text, s.value) "
                              "LIKE 't ' || ((e.globalTid >> 24) & 16777215) || ' %'")
        pooler = per_process(db, "clef", 59, "AND COALESCE(e.text, s.value) LIKE 'pooler n=1 %'")
        parse = per_process(db, "clef", 59, named("parse"))
        encode = per_process(db, "clef", 59, named("encode"))
    finally:
        db.close()
    assert set(clock) == set(batches), (pids, clock)
    for child in children:
        n, spread = clock[child]
        assert n >= int(CHILD_S / PERIOD_S) - 1 and spread >= CHILD_S - 2 * PERIOD_S, (child, clock[child])
        assert samples.get(child, (0, 0))[0] > 0, (child, samples)
        assert encode[child][0] == 1 and parse[child][0] == batches[child] - 1, (child, parse, encode, batches)
    assert clock[parent][1] >= 0.6 + CHILD_S, clock[parent]     # the parent's thread goes on across the forks
    assert parent not in encode and parse[parent][0] == batches[parent]
    assert {p: n for p, (n, _) in pooler.items()} == batches
    # analyze finds every process's batches (one request each), every range in a known domain
    res = analyze(str(db_path), StageConfig()).result
    assert res.requests == sum(batches.values()) and not [w for w in res.warnings if "never created" in w]
