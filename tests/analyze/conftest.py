"""Fixtures shared by the analysis tests."""
from __future__ import annotations

import shutil
import sqlite3

import pytest

from clef_prof.analyze import result as analysis


@pytest.fixture
def reversed_kernels(capture, tmp_path, monkeypatch):
    """gpu-q1c16-main with its kernel table stored in reverse start order, and the list that
    collects the `ordered` mode of each GPU pass analyze runs (GPU windows of 4096 rows): a
    table out of time order cannot be merged early, so the pass starts over holding all."""
    f = tmp_path / "reversed.sqlite"
    shutil.copyfile(capture("gpu-q1c16-main"), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        con.execute("CREATE TEMP TABLE k AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid DESC")
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM k")
    modes = []
    stream = analysis._gpu_stream

    def spy(*args, ordered, keep):
        modes.append(ordered)
        return stream(*args, ordered=ordered, keep=keep)

    monkeypatch.setattr(analysis, "_gpu_stream", spy)
    monkeypatch.setattr(analysis, "GPU_WINDOW", 4096)
    return f, modes
