"""`Analysis.window`: the row-level tables of one time window, filtered in SQL, are exactly the rows
of `Analysis.rows` that overlap it (same columns, dtypes, order, stage, batch and API kind), and
no more; a GPU row launched before the window keeps the batch of its launching call."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from clef_prof.analyze.figures import cuda as cu
from clef_prof.analyze.pipeline import analyze

FRAMES = ("calls", "transfers", "kernels", "gpu_busy")


def assert_window_of(full, win: dict, t0: int, t1: int, pks) -> None:
    """`win` is `full` cut to the rows overlapping [t0, t1] of processes `pks`."""
    for name in FRAMES:
        f = full.rows(name)
        key = f["gtid" if name == "calls" else "gpid"] >> 24
        f = f[(f["end"] >= t0) & (f["start"] <= t1) & (np.isin(key, pks) if pks is not None else True)]
        w = win[name]
        assert w.columns == f.columns and len(w) == len(f), name
        for col in f.columns:
            if col == "call":          # rows of two call tables: the same call, or -1 when it is not in the window
                calls = full.rows("calls")
                here = w["call"] >= 0
                assert np.array_equal(win["calls"]["corr"][w["call"][here]], calls["corr"][f["call"][here]])
                fc = f["call"][~here]
                j = np.maximum(fc, 0)
                assert ((fc < 0) | (calls["end"][j] < t0) | (calls["start"][j] > t1)).all()
                continue
            assert w[col].dtype == f[col].dtype and np.array_equal(w[col], f[col]), (name, col)


@pytest.mark.parametrize("name", ["gpu-q1c16-main", "gpu25-q1c16-pr"])
def test_window_rows_are_the_overlapping_rows(capture, name):
    a = analyze(str(capture(name)), rows=True)
    b = a.stages.batches
    pks = np.unique(b["gtid"] >> 24)
    for i in (0, len(b) // 2, len(b) - 3):
        t0, t1 = int(b["start"][i]) - 50_000, int(b["end"][i + 2]) + 50_000
        win = a.window(t0, t1, pks)
        assert len(win["transfers"]) and len(win["kernels"]) and len(win["calls"])
        assert_window_of(a, win, t0, t1, pks)
        assert_window_of(a, a.window(t0, t1), t0, t1, None)
    # nothing of another process
    assert all(len(t) == 0 for t in a.window(0, 1 << 62, [int(pks.max()) + 1]).values())


def test_gpu_rows_launched_before_the_window_keep_their_batch(capture):
    """A window that opens after a kernel's launch call ended but before the kernel did: the
    kernel is in it, its call is not, and its stage and batch are still the call's."""
    path = str(capture("gpu-q1c16-main"))
    a = analyze(path, rows=True)
    k, c = a.rows("kernels"), a.rows("calls")
    paired = (k["call"] >= 0) & (k["batch"] >= 0)
    call_end = np.where(paired, c["end"][np.maximum(k["call"], 0)], -1)
    late = np.flatnonzero(paired & (k["end"] > call_end + 1) & (k["start"] > call_end + 1))
    assert len(late)
    j = late[len(late) // 2]
    t0 = int(call_end[j]) + 1
    t1 = t0 + 2_000_000
    win = a.window(t0, t1)
    assert_window_of(a, win, t0, t1, None)
    wk = win["kernels"]
    early = wk[(wk["call"] < 0) & (wk["batch"] >= 0)]
    assert len(early) >= 1                          # paired by the correlationId lookup
    # by SQL alone: each such kernel's call (same process and correlationId) ends before the window
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        for corr, gpid in zip(early["corr"], early["gpid"]):
            (end,), = db.execute(f'SELECT "end" FROM {cu.RUNTIME} WHERE correlationId = ? AND globalTid >> 24 = ?',
                                 (int(corr), int(gpid) >> 24)).fetchall()
            assert end < t0


def test_untraced_capture_has_empty_windows(capture):
    a = analyze(str(capture("cpu23-inline")))
    assert all(len(t) == 0 for t in a.window(0, 1 << 62).values())


@pytest.mark.parametrize("name", ["gpu25-q1c16-pr", "gpu25-bertsrv"])
def test_an_empty_window_has_the_columns_of_the_full_tables(capture, name):
    """A window with no rows (before the first call) still has every column, of the same dtype, as
    `Analysis.rows`: a timeline can read `gpu_busy["kind"]` of any window."""
    a = analyze(str(capture(name)), rows=True)
    win = a.window(0, 1)
    assert all(len(t) == 0 for t in win.values())
    assert_window_of(a, win, 0, 1, None)


def test_gpu_rows_whose_call_is_not_in_the_capture(capture, tmp_path):
    """Kernels and copies whose launching call the capture lacks (deleted here, as when a capture
    starts after the launch): in a window as in `Analysis.rows`, in the 'outside' slot, no batch, no
    API kind, and the window's stage and batch of every other row unchanged."""
    from conftest import edited_copy

    path = edited_copy(capture("gpu25-bertsrv"), tmp_path / "lost-calls.sqlite",
                       f"DELETE FROM {cu.RUNTIME} WHERE correlationId % 7 = 0")
    a = analyze(str(path), rows=True)
    k, t = a.rows("kernels"), a.rows("transfers")
    lost = (k["call"] < 0)
    assert lost.sum() > 100 and (t["call"] < 0).sum() > 10
    n_slots = len(a.stages.config.stages) + 2
    assert (k["slot"][lost] == n_slots - 1).all() and (k["batch"][lost] == -1).all() and (k["api_kind"][lost] == 0).all()
    b = a.stages.batches
    for i in (0, len(b) // 2):
        t0, t1 = int(b["start"][i]), int(b["end"][i + 1])
        win = a.window(t0, t1)
        assert (win["kernels"]["call"] < 0).sum() and (win["kernels"]["batch"] >= 0).sum()
        assert_window_of(a, win, t0, t1, None)
    # memsets are GPU rows too: in gpu_busy with their kind
    busy = a.window(0, 1 << 62)["gpu_busy"]
    assert set(busy["kind"]) == {"kernel", "memcpy", "memset"}
