"""Every columnar reader, the C reader (`_scan`: values straight from SQLite into int64 buffers),
the small-export one (`group_concat` columns parsed by NumPy) and ADBC (Arrow buffers read by
NumPy), reads what the row reader reads, and refuses what it refuses: a value that is not a plain
integer in an integer column (a whole analysis through each: test_reader_stops.py)."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from clef_prof.analyze.read import export as export_module
from clef_prof.analyze.read.export import Export
from clef_prof.base.errors import CaptureError


@pytest.fixture(params=[pytest.param("native", marks=pytest.mark.native), "sqlite", "adbc"], autouse=True)
def reader(request, monkeypatch):
    monkeypatch.setattr(export_module, "READER", request.param)
    return request.param


def export(tmp_path, values: list) -> Export:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, b, s TEXT)")     # b: no type affinity, values kept as given
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, v, f"n,{i}\x1f") for i, v in enumerate(values)])
    con.commit()
    con.close()
    return Export.open(str(path))


@pytest.mark.parametrize("values", [[0, -1, 2**63 - 1, -2**63, None], [7], [], [-5, -6]])
def test_integers_read_alike(tmp_path, values, reader):
    with export(tmp_path, values) as cap:
        assert ((cap._adbc is not None), (cap._native is not None)) == (reader == "adbc", reader == "native")
        got = cap.read("SELECT a, b FROM t", ["a", "b"])
        threaded = cap.read("SELECT a, b FROM t", ["a", "b"], {"a": "int32"}, threaded=True)
        rows = cap.rows("SELECT a, b FROM t")
    assert got["a"].tolist() == threaded["a"].tolist() == [r[0] for r in rows]
    assert got["b"].tolist() == threaded["b"].tolist() == [0 if r[1] is None else r[1] for r in rows]
    assert got["b"].dtype == np.int64 and threaded["a"].dtype == np.int32


@pytest.mark.parametrize("bad", ["-", "1,2", "", "5-", "1-2", "abc", 5.0, 1e20, b"\x01"])
def test_non_integers_are_refused(tmp_path, bad):
    with export(tmp_path, [3, bad, 4]) as cap, pytest.raises(CaptureError, match="integer column 'b'"):
        cap.read("SELECT a, b FROM t", ["a", "b"])


def test_strings_read_as_rows(tmp_path):
    with export(tmp_path, [1, 2]) as cap:
        got = cap.read("SELECT s, a FROM t", ["s", "a"], {"s": "str"})
    assert got["s"].tolist() == ["n,0\x1f", "n,1\x1f"] and got["a"].tolist() == [0, 1]


def test_strings_of_every_storage_class(tmp_path, reader):
    """A text column read as text: NULL as '', text as stored. The C reader and sqlite3 read every
    storage class as text (a number as text, a blob's bytes as UTF-8, U+FFFD for bytes that are
    not); ADBC types the column from its first value and refuses the others."""
    path = tmp_path / "s.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (i INTEGER, s)")
    con.executemany("INSERT INTO t VALUES (?, ?)",
                    [(0, "héllo"), (1, None), (2, ""), (3, "x" * 70000), (4, 7), (5, b"ab\xffc")])
    con.commit()
    con.close()
    with Export.open(str(path)) as cap:
        got = cap.read("SELECT s, i FROM t WHERE i < 4 ORDER BY i", ["s", "i"], {"s": "str"})["s"].tolist()
        assert got == ["héllo", "", "", "x" * 70000]
        if reader == "adbc":
            with pytest.raises(CaptureError, match="cannot read"):
                cap.read("SELECT s, i FROM t ORDER BY i", ["s", "i"], {"s": "str"})
            return
        mixed = cap.read("SELECT s, i FROM t WHERE i >= 4 ORDER BY i", ["s", "i"], {"s": "str"})["s"].tolist()
    assert mixed == ["7", "ab\ufffdc"]
