"""record's reads of the export it made: read-only, and right whatever the folder is called."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from clef_prof.record.manifest import collected_span, count_rows

SLICE = Path(__file__).resolve().parents[2] / "traces" / "gpu-main-slice.sqlite"


@pytest.mark.parametrize("folder", ["plain", "run?x=1", "a#b", "100%25 done", "sp ace"])
def test_counts_in_any_folder_name(tmp_path, folder):
    """'?', '#' and '%' would end or change an unquoted SQLite URI, and the count would quietly be None."""
    d = tmp_path / folder
    d.mkdir()
    path = d / "capture.sqlite"
    shutil.copyfile(SLICE, path)
    before = path.read_bytes()
    db = sqlite3.connect(SLICE)
    nvtx, = db.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()
    first, last = db.execute("SELECT min(start), max(COALESCE(\"end\", start)) FROM NVTX_EVENTS "
                             "WHERE start >= 0 AND eventType IN (59, 60, 70, 71)").fetchone()
    db.close()
    assert count_rows(str(path), "NVTX_EVENTS") == nvtx > 0
    span = collected_span(str(path))
    assert span is not None and span[1] == first and span[2] <= last
    assert count_rows(str(path), "NO_SUCH_TABLE") is None
    assert path.read_bytes() == before
    assert sorted(p.name for p in d.iterdir()) == ["capture.sqlite"]
