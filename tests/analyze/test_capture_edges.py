"""Ranges exactly at the capture's edges, on the H200 capture of two concurrent executor threads
(tests/data/gpu25-concurrent) with three rows edited, each a case no recording gives on demand:

- the last batch range of one thread ends exactly at the session end (ANALYSIS_DETAILS.duration):
  a range nsys closed at the end of the session, cut with the stages inside it;
- a `parse` range on the other thread ends exactly where that thread's first batch range starts:
  the tail of a batch cut by the capture's start, cut too, and not counted outside every batch;
- a `parse` range on the main thread (no batch there): outside every batch, counted as such.

The expected figures are worked out by hand from the program's batch sizes (the truth file) and
the three edits (the cut batch's size read from its message), not by the code's own rules."""
from __future__ import annotations

import shutil
import sqlite3

import pytest

from clef_prof.analyze.pipeline import analyze

NAME = "gpu25-concurrent"
STAGES = ("parse", "transfer", "head", "encode")
NAMED = "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId"
BATCH_ROWS = f"""SELECT e.rowid, e.start, e."end", e.globalTid {NAMED}
                 WHERE e.eventType = 59 AND COALESCE(e.text, s.value) LIKE 'pooler n=%' ORDER BY e.start"""


def main_thread(gtid: int) -> int:
    """The global thread id of the main thread of gtid's process (pid << 24 | tid, tid = pid)."""
    pid = (gtid >> 24) & 0xFFFFFF
    return ((gtid >> 24) << 24) | pid


@pytest.fixture(scope="module")
def edited(capture, truth, tmp_path_factory):
    f = tmp_path_factory.mktemp("edges") / "edges.sqlite"
    shutil.copyfile(capture(NAME), f)
    f.chmod(0o644)
    con = sqlite3.connect(f)
    with con:
        (duration,), = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchall()
        batches = con.execute(BATCH_ROWS).fetchall()
        threads = sorted({g for *_, g in batches})
        last = [b for b in batches if b[3] == threads[0]][-1]
        con.execute('UPDATE NVTX_EVENTS SET "end" = ? WHERE rowid = ?', (duration, last[0]))
        first_other = [b for b in batches if b[3] == threads[1]][0]
        (parse_row,), = con.execute(f"""SELECT e.rowid {NAMED} WHERE COALESCE(e.text, s.value) = 'parse'
                                        AND e.globalTid = ? ORDER BY e.start LIMIT 1""", (threads[1],)).fetchall()
        for start, end, gtid in ((first_other[1] - 5000, first_other[1], threads[1]),
                                 (first_other[1] - 5000, first_other[1] - 1000, main_thread(threads[1]))):
            con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE rowid = ?", (parse_row,))
            con.execute('UPDATE NVTX_EVENTS SET start = ?, "end" = ?, globalTid = ? WHERE rowid = last_insert_rowid()',
                        (start, end, gtid))
        (size,), = con.execute(f"SELECT CAST(substr(COALESCE(e.text, s.value), 10) AS INTEGER) {NAMED} "
                               "WHERE e.rowid = ?", (last[0],)).fetchall()
    con.close()
    return f, truth(NAME), size


def test_ranges_at_the_session_end_and_at_the_first_batch_start_are_cut(edited):
    path, t, size = edited
    r = analyze(str(path)).result
    s = t["sql"]
    assert r.batches == s["batches"] - 1
    assert r.requests == s["requests"] - size
    # the batch that ends at the session end, and each of its four stages, are cut; the parse
    # range that ends where its thread's first batch starts is cut as well
    assert r.excluded.cut_at_edges == {"pooler": 1, "parse": 2, "transfer": 1, "head": 1, "encode": 1}
    # only the main thread's parse lies outside every batch: the cut one is not counted there
    assert r.excluded.outside_batch_instances == 1
    assert r.stages["parse"].outside_batch_instances == 1
    assert r.stages["parse"].instances == s["batches"] - 1 + 1
    for st in STAGES[1:]:
        assert r.stages[st].instances == s["batches"] - 1


def test_a_batch_range_with_the_same_span_as_another_counts_once(capture, truth, tmp_path):
    """Two push/pop batch ranges of one thread with the same start and end (an annotation and an
    injected range whose clocks read alike), one `pooler n=2`, the other `pooler n=9`: one batch,
    the first recorded, and one nested range."""
    f = tmp_path / "twin.sqlite"
    shutil.copyfile(capture(NAME), f)
    f.chmod(0o644)
    con = sqlite3.connect(f)
    with con:
        rowid, *_ = con.execute(BATCH_ROWS).fetchall()[5]
        (text,), = con.execute("SELECT text FROM NVTX_EVENTS WHERE rowid = ?", (rowid,)).fetchall()
        con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE rowid = ?", (rowid,))
        con.execute("UPDATE NVTX_EVENTS SET text = 'pooler n=9' WHERE rowid = last_insert_rowid()")
    con.close()
    s = truth(NAME)["sql"]
    r = analyze(str(f)).result
    assert text != "pooler n=9"
    assert (r.batches, r.requests, r.excluded.nested_batch_ranges) == (s["batches"], s["requests"], 1)
