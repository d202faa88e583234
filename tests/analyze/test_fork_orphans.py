"""Workers forked after their parent created its NVTX domain, with a client that does not create
it again in the child (tests/programs/fork_orphans.py records tests/data/cpu23-fork-orphans): nsys
starts a forked child's domains afresh, so the workers' ranges carry a domain id their process
never created. analyze cannot count them and says so by process, with the counts SQL finds; a
capture whose workers created their own domains (spawned ranks) has no such warning."""
from __future__ import annotations

import shutil
import sqlite3

import pytest

from clef_prof.analyze.pipeline import analyze
from conftest import sql

NAME = "cpu23-fork-orphans"

# per process: range rows whose domain id has no create row in that same process (a row without
# a globalTid is in no process)
ORPHANS_SQL = """
SELECT e.globalTid >> 24 & 16777215, count(*) FROM NVTX_EVENTS e
WHERE e.eventType IN (59, 60) AND COALESCE(e.domainId, 0) != 0 AND e.globalTid IS NOT NULL AND NOT EXISTS (
  SELECT 1 FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.domainId = e.domainId
  AND d.globalTid >> 24 = e.globalTid >> 24)
GROUP BY 1 ORDER BY 1
"""
PROCESSES_SQL = "SELECT count(DISTINCT globalTid >> 24) FROM NVTX_EVENTS"


def test_ranges_of_forked_workers_outside_every_domain_are_named_by_process(capture, truth):
    path = capture(NAME)
    gt = truth(NAME)["ground_truth"]
    orphans = sql(path, ORPHANS_SQL)
    assert len(orphans) == gt["processes"] - 1 == sql(path, PROCESSES_SQL)[0][0] - 1
    assert all(n > 0 for _, n in orphans)
    res = analyze(str(path)).result
    assert res.batches == res.requests == gt["counted_batches"] < gt["batches"]
    said = [w for w in res.warnings if "in a domain their process never created" in w]
    assert len(said) == 1
    who = ", ".join(f"pid {p}: {n:,}" for p, n in orphans)
    assert f"({who})" in said[0] and "not counted" in said[0] and "start workers with spawn" in said[0]


@pytest.mark.parametrize("name", ["cpu23-ranks", "gpu-q1c16-main"])
def test_processes_that_created_their_domains_have_none(capture, name):
    path = capture(name)
    assert sql(path, ORPHANS_SQL) == []
    assert not [w for w in analyze(str(path)).result.warnings if "never created" in w]


def test_rows_without_a_thread_or_domain_are_left_out_of_the_count(capture, tmp_path):
    """Damaged rows: a worker's range and a domain-create row without a globalTid, a create row
    without a domain id. The warning counts what SQL counts (rows with no process belong to none)."""
    f = tmp_path / "damaged.sqlite"
    shutil.copyfile(capture(NAME), f)
    f.chmod(0o644)
    worker = sql(f, ORPHANS_SQL)[0][0]
    with sqlite3.connect(f) as con:
        con.execute("UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS "
                    f"WHERE eventType = 59 AND (globalTid >> 24 & 16777215) = {worker})")
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                    "VALUES (1, 75, 'clef', NULL, 1), (1, 75, 'clef', 1 << 24, NULL)")
    orphans = sql(f, ORPHANS_SQL)
    assert orphans[0][0] == worker and orphans[0][1] == sql(capture(NAME), ORPHANS_SQL)[0][1] - 1
    said = [w for w in analyze(str(f)).result.warnings if "never created" in w]
    assert len(said) == 1 and "(" + ", ".join(f"pid {p}: {n:,}" for p, n in orphans) + ")" in said[0]
