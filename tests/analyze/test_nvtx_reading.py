"""How NVTX rows are read (clef_prof.analyze.read.nvtx), on SQL-changed copies of the real ranks capture
(tests/data/cpu23-ranks, see test_ranks_capture.py: 18 batches, 51 requests counted, replicas once):
each change is one an export can carry (the size in a payload column instead of the message, the
default domain, many domains, a batch name with glob characters, ranges ended on another thread,
names as text), and the figures must not move. Survivors of the mutation pass (docs/mutation.md).
"""
from __future__ import annotations

import re
import shutil
import sqlite3

import pytest

from clef_prof.analyze.read import nvtx
from clef_prof.analyze.read.export import Export
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.config import StageConfig

NAME = "cpu23-ranks"
PAYLOADS = ("int64Value", "uint64Value", "int32Value", "uint32Value")


def changed(capture, tmp_path, change) -> str:
    f = tmp_path / "changed.sqlite"
    shutil.copyfile(capture(NAME), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        change(con)
    return str(f)


def figures(path, **cfg):
    r = analyze(path, StageConfig(**cfg) if cfg else StageConfig()).result
    return r, (r.batches, r.requests, r.stages["head"].instances, sorted((x.pid, x.counted) for x in r.ranks))


@pytest.fixture(scope="module")
def original(capture):
    r, fig = figures(str(capture(NAME)))
    assert fig[:3] == (18, 51, 18)
    return fig


@pytest.mark.parametrize("column", PAYLOADS)
def test_batch_size_from_any_payload_column(capture, tmp_path, original, column):
    def move(con):
        rows = con.execute("SELECT rowid, text FROM NVTX_EVENTS WHERE text LIKE 'pooler %'").fetchall()
        for rowid, text in rows:
            n = int(re.search(r"(?:n|requests)=(\d+)", text).group(1))
            con.execute(f"UPDATE NVTX_EVENTS SET text = ?, {', '.join(f'{c} = NULL' for c in PAYLOADS)} WHERE rowid = ?",
                        (re.sub(r" (?:n|requests)=\d+", "", text), rowid))
            con.execute(f"UPDATE NVTX_EVENTS SET {column} = ? WHERE rowid = ?", (n, rowid))
    f = changed(capture, tmp_path, move)
    assert sql_one(f, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' OR text LIKE 'pooler requests=%'") == 0
    assert sql_one(f, f"SELECT count({column}) FROM NVTX_EVENTS WHERE text LIKE 'pooler%'") == 30
    r, fig = figures(f)
    assert fig == original and r.requests_source == "payload"
    assert not any("n=0" in w for w in r.warnings)


def test_default_domain(capture, tmp_path, original):
    f = changed(capture, tmp_path, lambda con: (con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 75"),
                                                con.execute("UPDATE NVTX_EVENTS SET domainId = NULL")))
    assert figures(f, domain="")[1] == original
    r = figures(f)[0]                                 # nothing in a domain named 'clef' now: said so
    assert r.batches == 0 and any(w.startswith("no range named 'pooler'") for w in r.warnings), r.warnings
    assert not any(w.startswith("no NVTX at all") for w in r.warnings)


def test_more_than_64_domains_of_one_name(capture, tmp_path, original):
    """65 (domain id, process) pairs named 'clef': read through the SQL subquery form, same figures."""
    def more(con):
        (gtid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 75 LIMIT 1").fetchone()
        for i in range(60):
            con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                        "VALUES (0, 75, 'clef', ?, ?)", (gtid, 1000 + i))
    f = changed(capture, tmp_path, more)
    with Export.open(f) as cap:
        assert len({(d, p) for d, p, n in nvtx.domains(cap) if n == "clef"}) == 66
    assert figures(f)[1] == original


def test_batch_name_with_glob_characters(capture, tmp_path, original):
    """A batch named 'po*ler' matches 'po*ler n=3', not 'poXler n=7' (a decoy copy of every batch)."""
    def rename(con):
        con.execute("UPDATE NVTX_EVENTS SET text = replace(text, 'pooler ', 'po*ler ') WHERE text LIKE 'pooler %'")
        con.execute("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId) "
                    "SELECT start + 1, \"end\" - 1, eventType, 'poXler n=7', globalTid, domainId FROM NVTX_EVENTS "
                    "WHERE text LIKE 'po*ler %'")
    f = changed(capture, tmp_path, rename)
    assert figures(f, batch="po*ler")[1] == original


def test_ranges_ended_on_another_thread(capture, tmp_path, original):
    end_other = "UPDATE NVTX_EVENTS SET endGlobalTid = globalTid + 1 WHERE eventType = 60"
    r, fig = figures(changed(capture, tmp_path, lambda con: con.execute(end_other)))
    assert fig == original
    assert "12 ranges ended on another thread than they started on" in "\n".join(r.warnings)
    same = tmp_path / "same"
    same.mkdir()
    r, fig = figures(changed(capture, same, lambda con: con.execute(
        "UPDATE NVTX_EVENTS SET endGlobalTid = globalTid WHERE eventType = 60")))
    assert fig == original and not any("another thread" in w for w in r.warnings)


def test_names_as_text_without_registered_strings(capture, tmp_path, original):
    def as_text(con):
        con.execute("UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds WHERE id = textId), textId = NULL "
                    "WHERE textId IS NOT NULL")
        con.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN textId")
    assert figures(changed(capture, tmp_path, as_text))[1] == original


def sql_one(path, query):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchone()[0]
    finally:
        con.close()


def test_census_counts_user_ranges_domains_and_marks(capture, tmp_path):
    """Ranges of every kind, user domains and user marks: Python sampling's own domain and marks
    are not the user's."""
    def add(con):
        (gtid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 75 LIMIT 1").fetchone()
        for did, name in ((900, "Python Backtrace"), (901, "Python Periodic Sampling"), (902, "mine")):
            con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (0, 75, ?, ?, ?)",
                        (name, gtid, did))
        for did, n in ((900, 3), (901, 2), (902, 4), (None, 1)):
            for _ in range(n):
                con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                            "VALUES (5, 34, 'm', ?, ?)", (gtid, did))
        con.execute("UPDATE NVTX_EVENTS SET eventType = 70 WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS "
                    "WHERE eventType = 59 LIMIT 3)")
    f = changed(capture, tmp_path, add)
    ranges = sql_one(f, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)")
    assert ranges == 90
    with Export.open(f) as cap:
        c = nvtx.census(cap)
    assert (c.ranges, c.user_domains, c.marks) == (ranges, ["clef", "mine"], 5)


def test_census_of_an_empty_table(capture, tmp_path):
    f = changed(capture, tmp_path, lambda con: con.execute("DELETE FROM NVTX_EVENTS"))
    with Export.open(f) as cap:
        c = nvtx.census(cap)
    assert (c.ranges, c.user_domains, c.marks) == (0, [], 0)


def test_nothing_matched_lists_the_twelve_most_frequent_names(capture):
    """Ranges seen, for a batch name that matches nothing: the 12 most frequent (domain, name)s."""
    path = capture(NAME)
    top = sql_rows(path, "SELECT COALESCE(s.value, e.text) AS n, count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                         "ON s.id = e.textId WHERE e.eventType IN (59, 60) GROUP BY n ORDER BY 2 DESC, n")
    assert len(top) > 12 and top[0][1] == top[1][1] == 30 > top[2][1]     # parse and head: once a batch
    r = analyze(str(path), StageConfig(batch="nope", stages=("nothing",))).result
    (w,) = [w for w in r.warnings if "ranges seen" in w]
    listed = re.findall(r"clef:(.+?) \((\d+)\)(?=, clef:|; set)", w)
    assert len(listed) == 12
    assert sorted((n, int(c)) for n, c in listed[:2]) == [("head", 30), ("parse", 30)]


def sql_rows(path, query):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_an_export_without_registered_strings(capture, tmp_path, original):
    """No StringIds table (names as text), the textId column still there: read as text."""
    def no_strings(con):
        con.execute("UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds WHERE id = textId), textId = NULL "
                    "WHERE textId IS NOT NULL")
        con.execute("DROP TABLE IF EXISTS ThreadNames")      # its names are StringIds too
        con.execute("DROP TABLE StringIds")
    assert figures(changed(capture, tmp_path, no_strings))[1] == original


def test_a_missing_payload_column_and_domains_without_id(capture, tmp_path, original):
    """An export without one payload column, and domain-create rows without a domain id (the
    user's domain and a sampling one): the same figures, the census unchanged."""
    def change(con):
        con.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN uint32Value")
        (gtid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 75 LIMIT 1").fetchone()
        for name in ("clef", "Python Backtrace"):
            con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (0, 75, ?, ?, NULL)",
                        (name, gtid))
    f = changed(capture, tmp_path, change)
    assert figures(f)[1] == original
    with Export.open(f) as cap:
        c = nvtx.census(cap)
    assert (c.ranges, c.user_domains, c.marks) == (90, ["clef"], 0)


def test_what_ends_an_id_is_whitespace_semicolon_and_parenthesis():
    """read_ids' regex stops an id where redact.RID's `[^\\s;)]+` does: at every character
    str.isspace() calls whitespace (NEL, NBSP, ideographic space, ...), ';' and ')', and nowhere else."""
    stops = {chr(i) for i in range(0x110000) if nvtx._ID_STOP.match(chr(i))}
    assert stops == {chr(i) for i in range(0x110000) if chr(i).isspace()} | {";", ")"}
    assert {"\x85", "\xa0", "\u3000", "\u2028", "\x1c"} < stops and not stops & {"\x00", ",", "(", "="}
