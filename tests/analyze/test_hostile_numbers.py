"""Hostile input that used to give silently wrong figures or a crash: copies of the real captures
in traces/, damaged with sqlite3. Each case is a one-line refusal (exit 1) or a warning that
--strict turns into exit 2; never a figure printed as if it were fine."""
from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.base.errors import CaptureError
from clicheck import run_main

TRACES = Path(__file__).resolve().parents[2] / "traces"
MAIN, PR25 = "gpu-main-slice", "gpu25-pr-slice"
RUNTIME, MEMCPY, KERNEL = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_KERNEL"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
STAGES = ("parse", "index", "transfer", "head", "encode")
STAGE_IDS = f"(SELECT id FROM StringIds WHERE value IN {STAGES})"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def one_line(p, code, *needles):
    assert p.returncode == code, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def damaged(tmp_path):
    """damaged(name, *sql) -> a copy of traces/<name>.sqlite with the statements applied."""
    def make(name, *sql):
        dst = tmp_path / f"{name}-damaged.sqlite"
        shutil.copyfile(TRACES / f"{name}.sqlite", dst)
        with sqlite3.connect(dst) as con:
            for s in sql:
                con.execute(s)
        con.close()
        return dst
    return make


def one_row(table, col, value):
    return f"UPDATE {table} SET [{col}] = {value} WHERE rowid = (SELECT min(rowid) + 7 FROM {table})"


# --- refusals: exit 1, one line ---------------------------------------------------------------

REFUSED = [
    ("text-in-runtime-start", MAIN, [one_row(RUNTIME, "start", "'abc'")], "integer column"),
    ("text-in-bytes", MAIN, [one_row(MEMCPY, "bytes", "'12x'")], "integer column 'bytes'"),
    ("real-in-bytes", MAIN, [one_row(MEMCPY, "bytes", "1.5")], "integer column 'bytes'"),
    ("text-in-nvtx-end", MAIN, ["UPDATE NVTX_EVENTS SET [end] = 'x' WHERE eventType = 59"], "integer column 'end'"),
    ("no-stringids", MAIN, ["DROP TABLE StringIds"], "no StringIds table"),
    ("no-runtime", MAIN, [f"DROP TABLE {RUNTIME}"], f"no {RUNTIME} table"),
    ("renamed-bytes", MAIN, [f"ALTER TABLE {MEMCPY} RENAME COLUMN bytes TO nbytes"], "has no column bytes"),
    ("renamed-copykind", MAIN, [f"ALTER TABLE {MEMCPY} RENAME COLUMN copyKind TO kind"], "has no column copyKind"),
    ("negative-bytes", MAIN, [f"UPDATE {MEMCPY} SET bytes = -bytes WHERE rowid % 3 = 0"], "bytes outside"),
    ("negative-copycount", PR25, [one_row(MEMCPY, "copyCount", -1)], "copyCount outside"),
    ("int64-overflow-bytes", MAIN, [f"UPDATE {MEMCPY} SET bytes = 4611686018427387904 WHERE rowid % 2 = 0"],
     "bytes outside"),
    ("huge-batch-size", MAIN, ["UPDATE NVTX_EVENTS SET text = 'pooler n=99999999999999999999999' "
                               "WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%')"],
     "batch size beyond"),
]


@pytest.mark.parametrize("base,sql,needle", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_in_one_line(damaged, base, sql, needle):
    f = damaged(base, *sql)
    one_line(run_main("analyze", f, "--strict", "-f", "json"), 1, needle, str(f))


# (RUNTIME.nameId is matched in SQL against the ids of the calls of interest: text matches none)
INTEGER_COLUMNS = [(MAIN, RUNTIME, c) for c in ("start", "end", "globalTid", "correlationId")]
INTEGER_COLUMNS += [(MAIN, MEMCPY, c) for c in ("start", "end", "correlationId", "globalPid", "bytes", "copyKind",
                                                "srcKind", "dstKind")]
INTEGER_COLUMNS += [(MAIN, KERNEL, c) for c in ("start", "end", "correlationId", "globalPid")]
INTEGER_COLUMNS += [(PR25, GRAPH_TRACE, c) for c in ("start", "end", "correlationId", "globalPid")]
INTEGER_COLUMNS += [(PR25, MEMCPY, "copyCount")]


@pytest.mark.parametrize("base,table,col", INTEGER_COLUMNS, ids=[f"{t[20:]}.{c}" for _, t, c in INTEGER_COLUMNS])
def test_text_in_every_integer_column_is_refused(damaged, base, table, col):
    f = damaged(base, one_row(table, col, "'1e3 oops'"))
    with pytest.raises(CaptureError, match="integer column '.*'"):
        analyze(str(f))


REQUIRED = [(RUNTIME, c) for c in ("start", "end", "globalTid", "correlationId", "nameId")]
REQUIRED += [(MEMCPY, c) for c in ("start", "end", "correlationId", "bytes", "copyKind")]
REQUIRED += [(KERNEL, c) for c in ("start", "end", "correlationId")]
REQUIRED += [("NVTX_EVENTS", c) for c in ("start", "end", "eventType", "globalTid", "domainId")]


@pytest.mark.parametrize("table,col", REQUIRED, ids=[f"{t}.{c}" for t, c in REQUIRED])
def test_every_required_column_renamed_is_refused(damaged, table, col):
    f = damaged(MAIN, f"ALTER TABLE {table} RENAME COLUMN [{col}] TO [{col}_renamed]")
    with pytest.raises(CaptureError, match=f"{table} has no column {col}"):
        analyze(str(f))


@pytest.mark.parametrize("n", [-5, 0])
def test_nonpositive_requests_refused(n):
    one_line(run_main("analyze", TRACES / f"{MAIN}.sqlite", "--requests", n), 1, "--requests must be a positive")


@pytest.mark.parametrize("t0,t1,says", [("nan", "0.5", "--from nan: expected a number of seconds"),
                                        ("0", "inf", "--to inf: expected a number of seconds"),
                                        ("0.5", "0.4", "--to must be after --from")])
def test_slice_window_must_be_finite(tmp_path, t0, t1, says):
    out = tmp_path / "out.sqlite"
    one_line(run_main("slice", TRACES / f"{MAIN}.sqlite", out, "--from", t0, "--to", t1), 1, says)
    assert not out.exists()


def test_unreadable_path(tmp_path):
    """A path that exists but cannot be opened (a socket; chmod 000 does not stop root)."""
    path = tmp_path / "cap.sqlite"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    try:
        one_line(run_main("analyze", path), 1, "not a regular file")
    finally:
        s.close()


@pytest.mark.parametrize("mode", ["delete", "wal"])
def test_export_being_written_is_refused(tmp_path, mode):
    """Another process holds an open write transaction: a hot -journal (or a -wal) lies beside the
    export, so an immutable read would see a half-written file."""
    f = tmp_path / "live.sqlite"
    shutil.copyfile(TRACES / f"{MAIN}.sqlite", f)
    writer = sqlite3.connect(f, isolation_level=None)
    try:
        writer.execute(f"PRAGMA journal_mode={mode}")
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(f"DELETE FROM {MEMCPY} WHERE rowid % 2 = 0")
        if mode == "wal":
            writer.execute("COMMIT")        # committed to the WAL, not yet checkpointed into the file
            writer.execute("BEGIN IMMEDIATE")
        side = Path(f"{f}-{'journal' if mode == 'delete' else 'wal'}")
        assert side.exists() and side.stat().st_size > 0
        one_line(run_cli("analyze", f, "-f", "json"), 1, "another process is writing it", side.name)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


# --- warnings: exit 0, or 2 with --strict, and the figure flagged -------------------------------

def strict_warns(f, needle, *args):
    p = run_main("analyze", f, "--strict", "-f", "json", *args)
    assert p.returncode == 2, p.stderr
    r = json.loads(p.stdout)
    assert any(needle in w for w in r["warnings"]), r["warnings"]
    return r


@pytest.fixture(scope="module")
def clean():
    return {n: analyze(str(TRACES / f"{n}.sqlite")).result for n in (MAIN, PR25)}


def test_clean_slices_raise_no_warning(clean):
    # the one warning of the 2023.4 capture: its nsys's CUPTI 12.4 is older than the CUDA 13.0 driver
    assert [w for w in clean[MAIN].warnings if "ships CUPTI 12.4" not in w] == []
    assert len(clean[MAIN].warnings) == 1
    assert [w for w in clean[PR25].warnings if "cut at the capture edges" not in w] == []


def test_half_the_kernels_lost_where_every_launch_is_in_a_stage(damaged, clean):
    """Every launch lies in `head` (the last slot holding calls): the check once skipped it."""
    assert clean[MAIN].outside_stages.in_batch.kernel_launches == 0
    f = damaged(MAIN, f"DELETE FROM {KERNEL} WHERE rowid % 2 = 0")
    strict_warns(f, "kernel launches in the pooler have no GPU record")


def test_memcpy_records_lost(damaged):
    strict_warns(damaged(MAIN, f"DELETE FROM {MEMCPY} WHERE rowid % 5 = 0"), "memcpy calls in the pooler have no GPU")


@pytest.mark.parametrize("table", [MEMCPY, KERNEL])
def test_duplicated_gpu_rows(damaged, table):
    f = damaged(MAIN, f"INSERT INTO {table} SELECT * FROM {table}")
    strict_warns(f, "duplicated rows")


def test_duplicated_nvtx_rows_counted_once(damaged, clean):
    f = damaged(MAIN, "INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE eventType IN (59, 60)")
    r = strict_warns(f, "NVTX ranges repeat another exactly")
    assert r["batches"] == clean[MAIN].batches == 48
    assert r["requests"] == clean[MAIN].requests
    assert r["stages"]["transfer"]["host_ns_total"] == clean[MAIN].stages["transfer"].host_ns_total
    assert r["per_request"]["h2d_copies"] == 9.0


@pytest.mark.parametrize("table", [KERNEL, MEMCPY, GRAPH_TRACE])
def test_reversed_gpu_intervals(damaged, clean, table):
    f = damaged(PR25, f"UPDATE {table} SET [end] = start - 1000 WHERE rowid % 4 = 0")
    r = strict_warns(f, "GPU activity records end before they start")
    assert r["overlap"]["gpu_busy_ms_per_request"] < clean[PR25].overlap.gpu_busy_ms_per_request


def test_reversed_api_calls(damaged):
    strict_warns(damaged(MAIN, f"UPDATE {RUNTIME} SET [end] = start - 5 WHERE rowid % 7 = 0"),
                 "CUDA API calls end before they start")


def test_reversed_and_endless_nvtx_ranges(damaged):
    f = damaged(MAIN, f"UPDATE NVTX_EVENTS SET [end] = start - 10 WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS "
                      f"WHERE textId IN {STAGE_IDS} LIMIT 3)")
    r = strict_warns(f, "3 NVTX ranges end before they start")
    assert sum(s["instances"] for s in r["stages"].values()) == 5 * 48 - 3
    f = damaged(MAIN, "UPDATE NVTX_EVENTS SET [end] = NULL WHERE rowid = "
                      "(SELECT rowid FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' LIMIT 1 OFFSET 10)")
    r = strict_warns(f, "ranges cut at the capture edges were excluded")
    assert r["batches"] == 47


def test_capture_started_and_stopped_inside_batches(damaged):
    """The slice as nsys would record it started at 3 ms, inside the second batch's transfer (its
    head and encode are recorded, its pooler range is not), and stopped at 22 ms, inside the
    fifth batch's head (pooler and head left open, parse, index and transfer done). The cut
    ranges are counted per name in the order they come in the capture: the open ones first,
    then the stages of the cut batches."""
    t0, t1 = 3_000_000, 22_000_000
    f = damaged(MAIN, f"DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND (start < {t0} OR start > {t1})",
                f"UPDATE NVTX_EVENTS SET [end] = NULL WHERE eventType = 59 AND [end] > {t1}")
    r = strict_warns(f, "7 ranges cut at the capture edges were excluded "
                        "(pooler: 1, head: 2, encode: 1, parse: 1, index: 1, transfer: 1)")
    assert r["batches"] == 2
    assert {k: s["instances"] for k, s in r["stages"].items()} == {k: 2 for k in STAGES}


def test_batches_without_any_stage(damaged):
    r = strict_warns(damaged(MAIN, f"DELETE FROM NVTX_EVENTS WHERE textId IN {STAGE_IDS}"), "but no stage range")
    assert r["batches"] == 48 and all(s["instances"] == 0 for s in r["stages"].values())


def test_all_batches_n0(damaged):
    r = strict_warns(damaged(MAIN, "UPDATE NVTX_EVENTS SET text = 'pooler n=0' WHERE text LIKE 'pooler n=%'"),
                     "48 of 48 'pooler' ranges say n=0")
    assert r["per_request"]["h2d_copies"] is None and r["per_request"]["pooler_host_ms"] is None


def test_some_batches_n0(damaged):
    strict_warns(damaged(MAIN, "UPDATE NVTX_EVENTS SET text = 'pooler n=0' WHERE text = 'pooler n=1'"),
                 "8 of 48 'pooler' ranges say n=0")


@pytest.mark.parametrize("value", ["'x'", "1.5", "-3"])
def test_a_session_length_that_is_no_length(damaged, value):
    """ANALYSIS_DETAILS.duration as text, a real or negative: refused in one line by every command
    that needs the session's length, instead of failing to make an int of it."""
    path = damaged(PR25, f"UPDATE ANALYSIS_DETAILS SET duration = {value}")
    one_line(run_cli("analyze", path), 1, "ANALYSIS_DETAILS.duration holds", "not a length in ns")
    one_line(run_cli("slice", path, path.with_name("o.sqlite"), "--from", "0", "--to", "0.1"), 1,
             "ANALYSIS_DETAILS.duration holds")
    assert not path.with_name("o.sqlite").exists()


@pytest.mark.parametrize("table, view", [("NVTX_EVENTS", "NVTX_EVENTS"), ("StringIds", "StringIds"),
                                         (RUNTIME, RUNTIME), ("NVTX_EVENTS", "nvtx_events")])
def test_a_view_in_a_tables_place_is_refused_not_run(damaged, table, view):
    """A view named as a table clef-prof reads (in any case: SQLite's names are not case-sensitive)
    runs whatever query it holds: here an endless recursive one, which would hang every read.
    Refused in one line, at once; a view of another name is the user's own and is left alone."""
    endless = (f"ALTER TABLE {table} RENAME TO moved; CREATE VIEW {view} AS WITH RECURSIVE c(x) AS "
               "(SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT moved.* FROM moved, c")
    path = damaged(PR25, *endless.split("; "))
    for args in (("analyze", path), ("report", path, "--html", path.with_name("r.html"))):
        one_line(run_cli(*args), 1, f"{view} is a view, not a table")
    for name in ("my_ranges", "NVTX_named", "CUPTI_ACTIVITY_KIND_KERNEL_NAMED", "ENUM_mine"):
        own = damaged(PR25, f"CREATE VIEW {name} AS SELECT * FROM NVTX_EVENTS")
        assert json.loads(run_cli("analyze", own, "-f", "json").stdout)["requests"] == 290, name


@pytest.mark.parametrize("sql", ["UPDATE NVTX_EVENTS SET start = -9223372036854775808 WHERE rowid = 5",
                                 'UPDATE NVTX_EVENTS SET "end" = 9223372036854775807 WHERE rowid = 6'])
def test_nvtx_times_beyond_any_session_are_refused(damaged, sql):
    """A range's start of -2**63 (or an end of 2**63 - 1) made its stage's host time wrap around
    int64 into -36 billion ms per request: refused in one line, by analyze, report and export."""
    path = damaged(PR25, sql)
    for args in (("analyze", path), ("report", path, "--html", path.with_name("r.html")),
                 ("export", path, "--chrome-trace", path.with_name("t.json"))):
        one_line(run_cli(*args), 1, "NVTX_EVENTS row holds a start or end beyond 4,611,686,018,427,387,904 ns",
                 "rowid")


@pytest.mark.parametrize("table, sql", [
    (KERNEL, 'UPDATE {t} SET "end" = "end" + 100000000000 WHERE rowid = 5'),     # a 100 s kernel in 0.3 s
    (MEMCPY, "UPDATE {t} SET start = -9223372036854775808 WHERE rowid = 1")])    # would wrap int64
def test_gpu_records_outside_the_session_are_left_out_of_busy_time(damaged, table, sql):
    """A GPU record that lies outside the session (CUPTI records none there): left out of GPU busy
    time, with a warning naming the bounds, and --strict fails; the other records' busy time is as
    it was (a 100 s kernel had made the GPU 99.8% busy and hidden the host-bound finding)."""
    clean = analyze(str(TRACES / f"{PR25}.sqlite")).result
    path = damaged(PR25, sql.format(t=table))
    r = analyze(str(path)).result
    said = [w for w in r.warnings if "lie outside the capture session" in w]
    assert len(said) == 1 and said[0].startswith("1 GPU activity records") and "end after 1.3 s" in said[0]
    assert not [w for w in r.warnings if "end before they start" in w]       # said once, as what it is
    busy, before = r.overlap.gpu_busy_fraction_of_pooler_span, clean.overlap.gpu_busy_fraction_of_pooler_span
    assert 0 < busy <= before and busy == pytest.approx(before, rel=0.05)
    assert "host-bound" in {f.id for f in r.findings}
    assert run_cli("analyze", "--strict", path).returncode == 2


def test_ranges_without_a_thread_are_said_to_be_left_out(damaged):
    """Nine batch ranges (`pooler n=11`) with a NULL globalTid fall out of every batch: 157 requests
    in 39 batches instead of 256 in 48. The count is short, and a warning says why (--strict: 2)."""
    path = damaged(MAIN, "UPDATE NVTX_EVENTS SET globalTid = NULL WHERE text = 'pooler n=11'")
    r = analyze(str(path)).result
    assert (r.requests, r.batches) == (157, 39)
    assert "9 NVTX ranges have no thread (globalTid NULL): a damaged export; they are left out of every batch " \
           "and stage, so counts may be short" in r.warnings
    assert not [w for w in analyze(str(TRACES / f"{MAIN}.sqlite")).result.warnings if "no thread" in w]


@pytest.mark.parametrize("size", ["1.5", "0x10", "1_1", "1.5GB", "11.0"])
def test_a_batch_size_that_is_no_count_is_refused(damaged, size):
    """`pooler n=1.5` was read as 1 and `n=0x10` as 0, silently: a size written as a number that
    is no count of requests is refused in one line, naming the range."""
    path = damaged(MAIN, f"UPDATE NVTX_EVENTS SET text = 'pooler n={size}' WHERE text = 'pooler n=11'")
    one_line(run_cli("analyze", path), 1, f"batch range 'pooler n={size}': batch size '{size}' is not written as a count")


@pytest.mark.parametrize("text, size", [("pooler n=11/32", 11), ("pooler batch=11x128", 11), ("pooler n=11.", 11),
                                        ("pooler n=11]", 11), ("pooler requests: 11/12", 11),
                                        ("pooler n=11 size=1.5 MB", 11), ("pooler n=11, batch=0x7f", 11)])
def test_a_batch_size_followed_by_other_text_keeps_its_digits(damaged, text, size):
    """Text after the digits (a fraction of a whole, a shape, punctuation), or another field after
    the size that is no count, is no damage: the size read is the batch's, as it always was (nine
    batches of 11: 256 requests)."""
    path = damaged(MAIN, f"UPDATE NVTX_EVENTS SET text = '{text}' WHERE text = 'pooler n=11'")
    r = analyze(str(path)).result
    assert (r.requests, r.batches) == (256, 48)


@pytest.mark.parametrize("reader", ["native", "adbc", "sqlite"])
def test_a_stage_name_stored_as_a_blob_still_names_its_stage(damaged, monkeypatch, reader):
    """A StringIds value stored as a BLOB equals no text in SQL: `parse` had 0 instances and the
    warning 'stages with no range: parse'. Read as text, it keeps its 53, through every reader."""
    from clef_prof.analyze.read import export
    if reader == "native" and export._native_module() is None:
        pytest.skip("the C reader is not built")
    monkeypatch.setattr(export, "READER", reader)
    path = damaged(PR25, "UPDATE StringIds SET value = CAST(value AS BLOB) WHERE value = 'parse'")
    r = analyze(str(path)).result
    assert (r.requests, r.stages["parse"].instances, r.warnings) == (290, 53, [])
