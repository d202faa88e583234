"""clef_prof.analyze.read.export at its edges, each against what the SQLite file format, the nsys
export or the docstring says: names cut to NAME_CHARS characters, the reader thread count, a
header page count SQLite itself does not trust, the driver version and session length read from
hand-edited copies of a real capture, and the row reader's NULLs and refusals."""
from __future__ import annotations

import os
import sqlite3

import pytest

from clef_prof.analyze.read import export as ex
from clef_prof.analyze.read.export import Export
from clef_prof.base.errors import CaptureError, ClefError
from conftest import edited_copy, sql


def _db(path, *statements):
    con = sqlite3.connect(path)
    with con:
        for st in statements:
            con.execute(*st) if isinstance(st, tuple) else con.execute(st)
    con.close()
    return path


def test_names_are_cut_to_name_chars(tmp_path):
    """StringIds values longer than NAME_CHARS (300) come back as their first 300 characters;
    shorter ones whole; a BLOB as UTF-8 with U+FFFD for bytes that are not."""
    long = "".join(chr(ord("a") + i % 26) for i in range(1000))
    path = _db(tmp_path / "s.sqlite", "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
               ("INSERT INTO StringIds VALUES (?, ?), (?, ?), (?, ?), (?, ?)",
                (0, long, 1, long[:300], 2, long[:299], 3, b"ok\xff")))
    with Export.open(str(path)) as cap:
        assert cap.strings == {0: long[:300], 1: long[:300], 2: long[:299], 3: "ok\ufffd"}


@pytest.mark.parametrize("cpus,want", [(None, 1), (1, 1), (2, 2), (3, 2), (64, 2)])
def test_reader_threads_default_to_two_or_one_on_one_cpu(monkeypatch, cpus, want):
    monkeypatch.delenv("CLEF_PROF_READERS", raising=False)
    monkeypatch.setattr(ex, "usable_cpus", lambda: cpus or 1)
    assert ex._readers() == want


@pytest.mark.parametrize("raw,want", [("1", 1), (" 5 ", 5), ("0", None), ("-2", None), ("two", None)])
def test_reader_threads_from_the_environment(monkeypatch, raw, want):
    monkeypatch.setenv("CLEF_PROF_READERS", raw)
    if want is None:
        with pytest.raises(ClefError, match="CLEF_PROF_READERS"):
            ex._readers()
    else:
        assert ex._readers() == want


def _patch_header(path, at: int, value: bytes):
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(value)


def test_a_page_count_sqlite_does_not_trust_is_not_a_truncation(capture, tmp_path):
    """The header's page count (bytes 28-31) is valid only when its version-valid-for number
    (92-95) equals the change counter (24-27) (the SQLite file format, section 1.3.7): a stale
    count larger than the file is no truncation and the export still reads; the same count made
    valid is refused as one."""
    path = tmp_path / "c.sqlite"
    path.write_bytes(capture("cpu23-sampled").read_bytes())
    head = path.read_bytes()[:100]
    pages = int.from_bytes(head[28:32], "big")
    assert head[24:28] == head[92:96] and pages * int.from_bytes(head[16:18], "big") == path.stat().st_size
    _patch_header(path, 28, (pages * 4).to_bytes(4, "big"))
    _patch_header(path, 92, (int.from_bytes(head[24:28], "big") + 1).to_bytes(4, "big"))
    with Export.open(str(path)) as cap:
        assert cap.count("NVTX_EVENTS") == sql(capture("cpu23-sampled"), "SELECT count(*) FROM NVTX_EVENTS")[0][0] > 0
    _patch_header(path, 92, head[24:28])
    with pytest.raises(CaptureError, match="truncated SQLite file"):
        Export.open(str(path))


ENV = "TARGET_INFO_SYSTEM_ENV"


@pytest.mark.parametrize("values,want", [
    (["13000"], 13000), (["12080", "13000", "12040"], 13000), (["unknown"], None), (["0"], None), (["1"], 1),
    (["-1"], None), (["", " 12080 "], 12080), ([], None)])
def test_cuda_driver_version(capture, tmp_path, values, want):
    """The CudaDriverVersion rows of TARGET_INFO_SYSTEM_ENV: the largest positive whole number,
    None when none is one (the recorded gpu25 capture says 13000: CUDA 13.0)."""
    src = capture("gpu25-concurrent")
    assert sql(src, f"SELECT value FROM {ENV} WHERE name = 'CudaDriverVersion'") == [("13000",)]
    row = f"FROM {ENV} WHERE name = 'CudaDriverVersion'"
    path = edited_copy(src, tmp_path / "drv.sqlite", f"CREATE TEMP TABLE k AS SELECT * {row}", f"DELETE {row}",
                       *(s for v in values
                         for s in (("UPDATE k SET value = ?", (v,)), f"INSERT INTO {ENV} SELECT * FROM k")))
    with Export.open(str(path)) as cap:
        assert cap.cuda_driver_version == want


def test_session_length(capture, tmp_path):
    """ANALYSIS_DETAILS.duration as recorded; None when the table holds no row."""
    src = capture("gpu25-concurrent")
    want = sql(src, "SELECT duration FROM ANALYSIS_DETAILS")[0][0]
    with Export.open(str(src)) as cap:
        assert cap.duration_ns == want > 0
    with Export.open(str(edited_copy(src, tmp_path / "d.sqlite", "DELETE FROM ANALYSIS_DETAILS"))) as cap:
        assert cap.duration_ns is None


@pytest.fixture(params=[pytest.param("native", marks=pytest.mark.native), "sqlite", "adbc"])
def reader(request, monkeypatch):
    monkeypatch.setattr(ex, "READER", request.param)
    return request.param


def test_row_reader_nulls_and_refusals(tmp_path, reader):
    """A query with a text column goes through the row reader: NULL integers read as 0, NULL text
    as ''; a value that is not an integer is refused naming its column and its type."""
    path = _db(tmp_path / "r.sqlite", "CREATE TABLE t (a INTEGER, b, s TEXT)",
               ("INSERT INTO t VALUES (?, ?, ?), (?, ?, ?), (?, ?, ?)", (1, None, "x", None, 7, None, 3, -2, "z")))
    with Export.open(str(path)) as cap:
        got = cap.read("SELECT a, b, s FROM t", ["a", "b", "s"], {"s": "str"})
        assert (got["a"].tolist(), got["b"].tolist(), got["s"].tolist()) == ([1, 0, 3], [0, 7, -2], ["x", "", "z"])
    _db(path, "UPDATE t SET b = 'oops' WHERE a = 3")
    with Export.open(str(path)) as cap, pytest.raises(CaptureError, match={
            "sqlite": "t holds str values in integer column 'b'", "native": "t holds text values in integer column 'b'"
            }.get(reader, "integer column 'b'")):
        cap.read("SELECT a, b, s FROM t", ["a", "b", "s"], {"s": "str"})


def test_a_directory_is_refused_as_a_capture(tmp_path):
    with pytest.raises(CaptureError, match="is a directory, not an nsys SQLite export"):
        Export.open(str(tmp_path))


@pytest.mark.parametrize("size", [16, 50, 99])
def test_a_header_shorter_than_100_bytes_is_not_sqlite(tmp_path, size):
    """The SQLite magic string followed by less than the 100-byte header: not a database."""
    path = tmp_path / "short.sqlite"
    path.write_bytes((b"SQLite format 3\x00" + bytes(100))[:size])
    with pytest.raises(CaptureError, match="short.sqlite: not an SQLite database"):
        Export.open(str(path))


def test_truncation_with_64_kib_pages(tmp_path):
    """A page size of 65536 is written as 1 in the header (the SQLite file format): a file of 64
    KiB pages cut by one page is refused as truncated, with the size its page count gives."""
    path = _db(tmp_path / "big.sqlite", "PRAGMA page_size = 65536", "CREATE TABLE t (x BLOB)",
               ("INSERT INTO t VALUES (?)", (bytes(300_000),)))
    head = path.read_bytes()[:100]
    pages = int.from_bytes(head[28:32], "big")
    assert int.from_bytes(head[16:18], "big") == 1 and pages >= 5 and path.stat().st_size == pages * 65536
    with Export.open(str(path)) as cap:
        assert cap.count("t") == 1
    with open(path, "r+b") as fh:
        fh.truncate((pages - 1) * 65536)
    with pytest.raises(CaptureError, match=f"truncated SQLite file \\({(pages - 1) * 65536} of {pages * 65536} bytes"):
        Export.open(str(path))


@pytest.mark.parametrize("suffix", ["-wal", "-journal"])
def test_a_side_file_being_written_is_refused_an_empty_one_is_not(capture, tmp_path, suffix):
    """A non-empty -wal or -journal beside the export means another process is writing it (one
    byte is enough); an empty one is what a finished writer may leave."""
    path = tmp_path / "c.sqlite"
    path.write_bytes(capture("cpu23-sampled").read_bytes())
    side = tmp_path / f"c.sqlite{suffix}"
    side.write_bytes(b"")
    with Export.open(str(path)) as cap:
        assert cap.has("NVTX_EVENTS")
    side.write_bytes(b"\x00")
    with pytest.raises(CaptureError, match=f"another process is writing it \\(c.sqlite{suffix} beside it\\)"):
        Export.open(str(path))


def _windows(cond: list[str]) -> list[tuple[int, int]]:
    """[(first rowid, end rowid)] of rowid_windows' conditions."""
    out = []
    for c in cond:
        a, b = c.split(" AND ")
        assert a.startswith("rowid >= ") and b.startswith("rowid < ")
        out.append((int(a[9:]), int(b[8:])))
    return out


@pytest.mark.parametrize("n,parts,want", [
    (9, 3, [(101, 104), (104, 107), (107, 110)]),                 # three windows of three rowids
    (10, 3, [(101, 105), (105, 109), (109, 111)]),                # 4, 4 and the 2 left
    (1, None, [(101, 102)]),                                      # one row: one window
    (10, 1, [(101, 111)]),
])
def test_rowid_windows_split_a_table_into_parts(tmp_path, n, parts, want):
    """rowids 101 .. 100+n in `parts` consecutive windows of ceil(n / parts) rowids (by hand)."""
    path = _db(tmp_path / "w.sqlite", "CREATE TABLE t (x INTEGER)",
               *((f"INSERT INTO t (rowid, x) VALUES ({100 + i}, {i})") for i in range(1, n + 1)))
    with Export.open(str(path)) as cap:
        assert cap.rowid_range("t") == (101, 100 + n)
        assert _windows(cap.rowid_windows("t", parts=parts)) == want


def test_rowid_windows_of_rows_each(tmp_path):
    """`rows` rowids per window, and at least one window per reader thread."""
    path = _db(tmp_path / "w.sqlite", "CREATE TABLE t (x INTEGER)",
               *((f"INSERT INTO t (rowid, x) VALUES ({100 + i}, {i})") for i in range(1, 11)))
    with Export.open(str(path)) as cap:
        assert _windows(cap.rowid_windows("t", rows=4)) == [(101, 105), (105, 109), (109, 111)]
        assert len(cap.rowid_windows("t", rows=100)) == min(ex.READERS, 10)


def test_absent_and_empty_tables(tmp_path):
    """A table the export lacks, or one without rows: no columns (absent), no rowid range, no
    window, a count of 0."""
    path = _db(tmp_path / "e.sqlite", "CREATE TABLE empty (x INTEGER)")
    with Export.open(str(path)) as cap:
        assert (cap.columns("absent"), cap.columns("empty")) == ([], ["x"])
        for t in ("absent", "empty"):
            assert (cap.rowid_range(t), cap.rowid_windows(t), cap.count(t)) == (None, [], 0)
        assert (cap.strings, cap.export_meta, cap.capture_meta) == ({}, {}, {})     # no StringIds, no metadata


@pytest.mark.native
def test_reader_chosen(tmp_path, monkeypatch):
    """Without CLEF_PROF_READER the C reader when it is built, whatever the size; without it an
    export of ADBC_BYTES or more is read through ADBC, a smaller one through sqlite3.
    CLEF_PROF_READER=sqlite, adbc or native forces one; native without the C reader is refused
    in one line."""
    pytest.importorskip("adbc_driver_sqlite")
    built = ex._native_module()
    path = _db(tmp_path / "r.sqlite", "CREATE TABLE t (x INTEGER)", "INSERT INTO t VALUES (5)")
    size = path.stat().st_size
    for reader, limit, module, want in (("", size + 1, built, "native"), ("", size, None, "adbc"),
                                        ("", size + 1, None, "sqlite"), ("sqlite", 0, built, "sqlite"),
                                        ("adbc", size + 1, built, "adbc"), ("native", 0, built, "native")):
        monkeypatch.setattr(ex, "READER", reader)
        monkeypatch.setattr(ex, "ADBC_BYTES", limit)
        monkeypatch.setattr(ex, "_native_module", lambda: module)
        with Export.open(str(path)) as cap:
            chosen = "native" if cap._native is not None else "adbc" if cap._adbc is not None else "sqlite"
            assert (chosen, cap.read("SELECT x FROM t", ["x"])["x"].tolist()) == (want, [5]), reader
    monkeypatch.setattr(ex, "READER", "native")
    monkeypatch.setattr(ex, "_native_module", lambda: None)
    with pytest.raises(ClefError, match=r"^CLEF_PROF_READER=native: the C reader is not built \(pip install "
                                        r"needs a C compiler and Python's headers\)$"):
        Export.open(str(path))


def _open_fds(path) -> int:
    fd = "/proc/self/fd"
    return sum(1 for f in os.listdir(fd) if os.path.realpath(os.path.join(fd, f)) == os.path.realpath(path))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_close_releases_the_file(capture):
    """Closing the export closes every connection it opened on the file, the reader threads' too."""
    path = capture("gpu25-concurrent")
    before = _open_fds(path)
    cap = Export.open(str(path))
    with cap.stream([ex.Query(i, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL", ["start"]) for i in range(4)],
                    workers=2) as s:
        assert len(list(s)) == 4
    assert _open_fds(path) > before
    cap.close()
    assert _open_fds(path) == before


def test_capture_settings_per_process_and_flags(tmp_path):
    """META_DATA_CAPTURE keys lose their `PROCESS_N:` prefix only (values of several processes kept
    in order); a flag is True when any process says true, False when all say otherwise, None when
    no process records it."""
    rows = [("PROCESS_0:COLLECT_CUDA_TRACE", "false"), ("PROCESS_1:COLLECT_CUDA_TRACE", "True"),
            ("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", "Graph"), ("DEVICE:ID", "x"), ("PROCESS_X", "y"),
            ("COLLECT_NVTX_TRACE", "false")]
    path = _db(tmp_path / "m.sqlite", "CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)",
               *(("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", r) for r in rows))
    with Export.open(str(path)) as cap:
        assert cap.capture_meta == {"COLLECT_CUDA_TRACE": ["false", "True"], "CUDA_GRAPH_TRACE_OPTIONS:MODE": ["Graph"],
                                    "DEVICE:ID": ["x"], "PROCESS_X": ["y"], "COLLECT_NVTX_TRACE": ["false"]}
        assert (cap.capture_flag("COLLECT_CUDA_TRACE"), cap.capture_flag("COLLECT_NVTX_TRACE"),
                cap.capture_flag("COLLECT_OSRT_TRACE")) == (True, False, None)


@pytest.mark.parametrize("ddl", [None, "CREATE TABLE {t} (other TEXT, value TEXT)"], ids=["absent", "no such column"])
def test_driver_version_and_duration_without_their_tables(tmp_path, ddl):
    """No TARGET_INFO_SYSTEM_ENV / ANALYSIS_DETAILS, or one without the column read: None."""
    stmts = [ddl.format(t=t) for t in ("TARGET_INFO_SYSTEM_ENV", "ANALYSIS_DETAILS")] if ddl else []
    path = _db(tmp_path / "v.sqlite", "CREATE TABLE x (a INTEGER)", *stmts)
    with Export.open(str(path)) as cap:
        assert (cap.cuda_driver_version, cap.duration_ns) == (None, None)


def test_text_of_digits_stays_text(tmp_path, reader):
    """A text column whose values are all digits is read as those strings, not as integers."""
    path = _db(tmp_path / "d.sqlite", "CREATE TABLE t (a INTEGER, s TEXT)",
               ("INSERT INTO t VALUES (?, ?), (?, ?)", (1, "12", 2, "007")))
    with Export.open(str(path)) as cap:
        got = cap.read("SELECT s, a FROM t", ["s", "a"], {"s": "str"})
        alone = cap.read("SELECT s FROM t", ["s"], {"s": "str"})
    assert (got["s"].tolist(), got["a"].tolist(), alone["s"].tolist()) == (["12", "007"], [1, 2], ["12", "007"])


def test_adbc_text_after_the_first_record_batch_is_refused(tmp_path, monkeypatch):
    """ADBC types a column from its first record batch: text in a later batch of an integer column
    is refused as text in that column, as the sqlite3 reader refuses it."""
    pytest.importorskip("adbc_driver_sqlite")
    monkeypatch.setattr(ex, "READER", "adbc")
    monkeypatch.setattr(ex, "BATCH_ROWS", 4)
    path = _db(tmp_path / "b.sqlite", "CREATE TABLE t (a INTEGER, b)",
               *(f"INSERT INTO t VALUES ({i}, {i * 10})" for i in range(10)), "INSERT INTO t VALUES (10, 'x')")
    with Export.open(str(path)) as cap:
        assert cap._adbc is not None
        for n in (3, 8, 10):                    # one, two and three record batches
            assert cap.read(f"SELECT a, b FROM t WHERE a < {n}", ["a", "b"])["b"].tolist() == list(range(0, 10 * n, 10))
        with pytest.raises(CaptureError, match="t holds .* values in integer column 'b'"):
            cap.read("SELECT a, b FROM t", ["a", "b"])


def test_no_rows_through_the_row_reader(tmp_path, reader):
    path = _db(tmp_path / "n.sqlite", "CREATE TABLE t (a INTEGER, s TEXT)")
    with Export.open(str(path)) as cap:
        got = cap.read("SELECT a, s FROM t", ["a", "s"], {"s": "str"})
    assert (got["a"].tolist(), got["s"].tolist(), got["a"].dtype) == ([], [], "int64")


def test_an_sql_error_inside_a_reader_is_one_capture_error(tmp_path, reader):
    """SQLite failing while it steps the query (here an integer overflow) is a CaptureError that
    says the capture cannot be read, through either reader, not the driver's own exception."""
    path = _db(tmp_path / "o.sqlite", "CREATE TABLE t (a INTEGER)", "INSERT INTO t VALUES (1)")
    with Export.open(str(path)) as cap, pytest.raises(CaptureError, match="o.sqlite: cannot read .*integer overflow"):
        cap.read("SELECT abs(-9223372036854775808) FROM t", ["a"])


NOT_INTEGERS = [[3, 4, bad] for bad in (5.5, "1e3", "7x", "12 ", "+3")] + [[bad] for bad in (5.5, "1e3", "7x")]
NOT_INTEGERS += [["1,2", ""], [3, 4, "5-"], [3, 4, "1-2"], [3, 4, "-"], [3, 4, "--3"], ["1-2"], [3, 4, ""], [1, "", 2]]


@pytest.mark.parametrize("values", NOT_INTEGERS, ids=repr)
def test_a_non_integer_last_or_alone_is_refused(tmp_path, reader, values):
    """A value that is not a plain integer, as the last value of a column or its only one (where a
    number parser would stop at its first non-digit and still count one value per row), or the text
    '1,2' beside an empty text (as many numbers as rows, commas in the wrong places), is refused."""
    path = _db(tmp_path / "x.sqlite", "CREATE TABLE t (b)", *(("INSERT INTO t VALUES (?)", (v,)) for v in values))
    with Export.open(str(path)) as cap, pytest.raises(CaptureError, match="integer column 'b'"):
        cap.read("SELECT b FROM t", ["b"])


def test_a_column_of_nulls_reads_as_zeros_and_empty_text(tmp_path, reader):
    """A column whose every value is NULL (ADBC types it null, not integer or text): zeros, ''."""
    path = _db(tmp_path / "z.sqlite", "CREATE TABLE t (a INTEGER, s TEXT)", "INSERT INTO t VALUES (NULL, NULL)",
               "INSERT INTO t VALUES (NULL, NULL)")
    with Export.open(str(path)) as cap:
        got = cap.read("SELECT a FROM t", ["a"])
        text = cap.read("SELECT s, a FROM t", ["s", "a"], {"s": "str"})
    assert (got["a"].tolist(), text["s"].tolist(), text["a"].tolist()) == ([0, 0], ["", ""], [0, 0])
