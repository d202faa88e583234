"""scrub on the odd rows a damaged or unusual export holds (a real nsys 2023.4 capture, cpu23-inline,
changed by SQL): a command row without a process prefix, empty names and NULL values, a PROCESSES table
without its name column. Each is scrubbed by its rule, nothing raises, and a second scrub is a no-op."""
from __future__ import annotations

import re
import sqlite3

import pytest

from clef_prof.capture.scrub import REMOVED, scrub
from conftest import edited_copy


def _scrubbed(path):
    con = sqlite3.connect(path)
    try:
        with con:
            counts = scrub(con)
        with con:
            again = scrub(con)
        return counts, again, con.execute("SELECT name, value FROM META_DATA_CAPTURE").fetchall(), \
            con.execute("SELECT * FROM PROCESSES").fetchall()
    finally:
        con.close()


def test_odd_rows_are_scrubbed_by_their_rule(capture, tmp_path):
    path = edited_copy(capture("cpu23-inline"), tmp_path / "odd.sqlite",
                       "INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('COMMAND', '/home/alice/bin/srv --port 1')",
                       "INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_9:COMMAND', NULL)",
                       "INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('', 'plain')",
                       "INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_8:COMMAND', '[removed]')",
                       "INSERT INTO PROCESSES (globalPid, pid, name) VALUES (1, 77, NULL)")
    counts, again, meta, procs = _scrubbed(str(path))
    meta = dict((n, v) for n, v in meta if n == "" or "COMMAND" in n)
    # a process's command keeps its executable's name; a bare COMMAND row is text like any other:
    # its home folder's user gets a pseudonym, the rest stays
    assert meta["PROCESS_0:COMMAND"] == "python"
    assert meta["COMMAND"].startswith("/home/[user-") and meta["COMMAND"].endswith("]/bin/srv --port 1")
    assert meta["PROCESS_9:COMMAND"] is None and meta["PROCESS_8:COMMAND"] == REMOVED and meta[""] == "plain"
    assert (1, 77, None) in procs and ("kthreadd",) in {(p[2],) for p in procs}
    assert counts["META_DATA_CAPTURE"]["command-line"] == 1 and again == {}


def test_processes_without_a_name_column(capture, tmp_path):
    path = edited_copy(capture("cpu23-inline"), tmp_path / "noname.sqlite", "ALTER TABLE PROCESSES DROP COLUMN name")
    counts, again, meta, procs = _scrubbed(str(path))
    assert "PROCESSES" not in counts and again == {} and len(procs[0]) == 2


def test_a_blob_fact_name_and_a_lower_case_processes_table(capture, tmp_path):
    """SQLite keeps a BLOB in a TEXT column, and matches table names without case: a system fact
    whose name is bytes is removed like any fact off the allow-list, and a `processes` table that
    is not nsys' PROCESSES is left alone (it is scrubbed as text)."""
    path = edited_copy(capture("cpu23-inline"), tmp_path / "blob.sqlite",
                       "INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                       "VALUES (0, 'x', X'48617358', 0, '1')",
                       "DROP TABLE PROCESSES",
                       "CREATE TABLE processes (name TEXT)",
                       "INSERT INTO processes VALUES ('/opt/srv/bin/python3 -m vllm')")
    con = sqlite3.connect(path)
    try:
        with con:
            counts = scrub(con)
        assert con.execute("SELECT count(*) FROM TARGET_INFO_SYSTEM_ENV WHERE typeof(name) = 'blob'").fetchone() == (0,)
        assert con.execute("SELECT name FROM processes").fetchall() == [("/opt/srv/bin/python3 -m vllm",)]
    finally:
        con.close()
    assert "PROCESSES" not in counts and "processes" not in counts


TOKEN = "hf_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv"    # the shape of a Hugging Face token, made up


def test_process_streams_without_string_ids_or_content_ids(capture, tmp_path):
    for name, st in (("no-strings", "DROP TABLE StringIds"),
                     ("no-content", "ALTER TABLE ProcessStreams DROP COLUMN contentId")):
        path = edited_copy(capture("gpu25-q1c16-pr"), tmp_path / f"{name}.sqlite", st)
        con = sqlite3.connect(path)
        try:
            with con:
                counts = scrub(con)
        finally:
            con.close()
        assert "process-stream" not in counts.get("StringIds", {}), name


def test_a_row_whose_rowid_names_a_stream_is_still_read_in_other_tables(capture, tmp_path):
    """The stream contents (StringIds rows that ProcessStreams names) are removed whole; a row of
    another table with the same rowid is text like any other, and its secret goes."""
    path = edited_copy(capture("gpu25-q1c16-pr"), tmp_path / "same-rowid.sqlite",
                       "CREATE TABLE NOTES (note TEXT)",
                       ("INSERT INTO NOTES (rowid, note) VALUES (274, ?)", (f"token {TOKEN}",)),
                       ("INSERT INTO NOTES (rowid, note) VALUES (18, ?)", (f"again {TOKEN}",)),
                       "CREATE TABLE ENUM_NOTES (name TEXT)",
                       ("INSERT INTO ENUM_NOTES VALUES (?)", (TOKEN,)))
    con = sqlite3.connect(path)
    try:
        with con:
            counts = scrub(con)
        notes = [v for (v,) in con.execute("SELECT note FROM NOTES ORDER BY rowid")]
        assert not [v for v in notes if TOKEN in v] and len(notes) == 2
        assert con.execute("SELECT value FROM StringIds WHERE id IN (18, 274)").fetchall() == [(REMOVED,), (REMOVED,)]
        # nsys' own enumeration tables are not user text: left as they are
        assert con.execute("SELECT name FROM ENUM_NOTES").fetchall() == [(TOKEN,)]
    finally:
        con.close()
    assert counts["StringIds"]["process-stream"] == 2


def test_scrub_names_the_source_of_a_file_that_is_no_export(tmp_path):
    from clef_prof.capture.scrub import scrub_file
    from clef_prof.base.errors import CaptureError
    src = tmp_path / "plain.sqlite"
    with sqlite3.connect(src) as c:
        c.execute("CREATE TABLE t (x)")
    with pytest.raises(CaptureError, match="^" + re.escape(f"{src}: not an Nsight Systems export")):
        scrub_file(str(src), str(tmp_path / "out.sqlite"))
    assert not (tmp_path / "out.sqlite").exists()


def test_check_groups_show_three_example_rows():
    from clef_prof.capture.scrub import Finding, grouped
    found = [Finding("NOTES", "note", i, "hf-token", "x") for i in (9, 3, 7, 1, 5)]
    (g,) = grouped(found)
    assert (g.count, g.rowids, g.place) == (5, [1, 3, 5], "NOTES.note")
