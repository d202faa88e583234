"""analyze's per-batch table carries, streamed window by window, the CUDA work of each stage in
each batch (`<stage>_<count>`) and each batch's own GPU busy time (`gpu_own_ns`, the union of
the GPU intervals launched inside it): both equal the figures computed from the row-level
frames (`analyze(rows=True)`), in time order, out of order (`Unordered`), and when the GPU work
of one batch runs into the next batch's."""
from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest

from clef_prof.analyze.figures import cuda as cu
from clef_prof.analyze.read import export as export_mod
from clef_prof.analyze.figures import cuda_pass as analysis
from clef_prof.analyze.figures.metrics import BATCH_KEYS
from clef_prof.analyze.pipeline import analyze

GPU = ("gpu-q1c16-main", "gpu-q1c16-pr", "gpu25-bertsrv", "gpu25-sync-slice")


def _row_level(a) -> dict[str, np.ndarray]:
    """The per-batch figures from the row-level frames: counts grouped by (batch, slot) with
    pandas, and each batch's own busy time by merging its sorted intervals one by one."""
    n, stages = len(a.batch_table), a.config.stages
    calls, tr, busy = a.calls, a.transfers, a.gpu_busy
    out = {}

    def per(frame, mask, code, weights=None):
        sub = frame[mask & (frame["slot"] == code) & (frame["batch"] >= 0)]
        got = (sub.groupby("batch")[weights].sum() if weights else sub.groupby("batch").size())
        return got.reindex(range(n), fill_value=0).to_numpy(np.int64)

    for code, s in enumerate(stages):
        out[f"{s}_kernel_launches"] = per(calls, calls["kind"] == cu.LAUNCH, code)
        out[f"{s}_graph_launches"] = per(calls, calls["kind"] == cu.GRAPH, code)
        for label, kind in (("h2d", cu.HTOD), ("d2h", cu.DTOH)):
            out[f"{s}_{label}_copies"] = per(tr, tr["copyKind"] == kind, code, "copies")
            out[f"{s}_{label}_bytes"] = per(tr, tr["copyKind"] == kind, code, "bytes")
    own = np.zeros(n, np.int64)
    mine = busy[(busy["slot"] <= len(stages)) & (busy["batch"] >= 0) & (busy["end"] >= busy["start"])]
    for b, g in mine.sort_values(["batch", "start"]).groupby("batch"):
        total, lo, hi = 0, None, None
        for s, e in zip(g["start"], g["end"]):
            if hi is None or s > hi:
                total += 0 if hi is None else hi - lo
                lo, hi = s, e
            else:
                hi = max(hi, e)
        own[b] = total + hi - lo
    out["gpu_own_ns"] = own
    return out


def _assert_streamed_equal_rows(a) -> None:
    ref = _row_level(a)
    pb = a.batch_table
    for col, want in ref.items():
        np.testing.assert_array_equal(pb[col], want, err_msg=col)
    # the batch totals are the stage columns plus the batch's CUDA work outside every stage
    for k in BATCH_KEYS:
        staged = sum(np.asarray(pb[f"{s}_{k}"]) for s in a.config.stages)
        assert (staged <= pb[k]).all(), k


@pytest.mark.parametrize("name", GPU)
def test_streamed_per_batch_figures_equal_the_row_level_ones(capture, monkeypatch, name):
    a = analyze(str(capture(name)), rows=True)
    _assert_streamed_equal_rows(a)
    pb = a.batch_table
    assert pb["gpu_own_ns"].sum() > 0
    req = a.result.requests
    for s in a.config.stages:     # the stage blocks of the JSON are these columns summed (all in batches here)
        for k in ("h2d_copies", "kernel_launches", "d2h_copies"):
            if a.result.stages[s].outside_batch_instances == 0:
                assert pb[f"{s}_{k}"].sum() == getattr(a.result.stages[s].cuda, k), (s, k)
    # no batch's GPU work overlaps the next one's here, so the per-batch unions add up to the capture's
    assert pb["gpu_own_ns"].sum() / 1e6 / req == pytest.approx(a.result.per_request.gpu_busy_ms, rel=1e-12)
    # small windows (many watermarks) and one reader give the same table
    monkeypatch.setattr(export_mod, "CHUNK_ROWS", 997)
    monkeypatch.setattr(analysis, "GPU_WINDOW", 1013)
    monkeypatch.setattr(export_mod, "READERS", 1)
    small = analyze(str(capture(name))).batch_table
    assert small.columns == pb.columns
    for col in pb.columns:
        np.testing.assert_array_equal(small[col], pb[col], err_msg=col)


def test_out_of_order_pass_gives_the_same_per_batch_figures(capture, reversed_kernels, monkeypatch):
    """A kernel table stored in reverse start order makes the GPU pass start over holding every
    interval (`ordered=False`, merged every COMPACT_AT rows): the per-batch table is unchanged."""
    f, modes = reversed_kernels
    monkeypatch.setattr("clef_prof.analyze.figures.overlap.COMPACT_AT", 5000)   # merge held intervals several times
    a = analyze(str(f))
    assert modes == [True, False]
    ref = analyze(str(capture("gpu-q1c16-main"))).batch_table
    for col in ref.columns:
        np.testing.assert_array_equal(a.batch_table[col], ref[col], err_msg=col)
    _assert_streamed_equal_rows(analyze(str(f), rows=True))


def test_gpu_work_running_into_the_next_batch(capture, tmp_path, monkeypatch):
    """Every 7th kernel of a real capture lengthened by 4 ms (starts, hence the time order, kept):
    the GPU work of a batch now runs past the start of the next batch's, so each batch's union is
    held behind the watermark while the next batch's rows arrive, and the per-batch unions add up
    to more than the capture's union, which merges across batches."""
    f = tmp_path / "long-kernels.sqlite"
    shutil.copyfile(capture("gpu-q1c16-main"), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 4000000 WHERE rowid % 7 = 0")
    monkeypatch.setattr(analysis, "GPU_WINDOW", 97)       # watermarks every few batches
    a = analyze(str(f), rows=True)
    _assert_streamed_equal_rows(a)
    busy = a.gpu_busy
    mine = busy[(busy["slot"] <= len(a.config.stages)) & (busy["batch"] >= 0)]
    ends, starts = mine.groupby("batch")["end"].max(), mine.groupby("batch")["start"].min()
    into_next = int((ends.to_numpy()[:-1] > starts.to_numpy()[1:]).sum())
    assert into_next > 100                     # of 282 batches
    own_total_ms = a.batch_table["gpu_own_ns"].sum() / 1e6
    assert own_total_ms > a.result.per_request.gpu_busy_ms * a.result.requests * 1.01
    pd.testing.assert_series_equal(pd.Series(a.batch_table["kernel_launches"]),
                                   pd.Series(analyze(str(capture("gpu-q1c16-main"))).batch_table["kernel_launches"]))


@pytest.mark.parametrize("far", [False, True])
def test_batch_union_by_brute_force(far):
    """BatchUnion against a per-batch union by hand, fed in windows with watermarks; with `far`
    the last interval starts 2**61 ns later (a damaged row), so the packed (batch, time) sort key
    would overflow and the lexsort path runs."""
    from clef_prof.analyze.figures.overlap import BatchUnion

    rng = np.random.default_rng(7)
    n, batches, spread = 4000, 9, 10**9
    s = np.sort(rng.integers(0, spread, n)).astype(np.int64)
    e = s + rng.integers(0, spread // 50, n)
    b = np.minimum(s // (spread // batches), batches - 1)
    mixed = rng.random(n) < 0.2                 # a fifth of the work belongs to another batch
    b[mixed] = rng.integers(0, batches, int(mixed.sum()))
    if far:
        s[-1], e[-1] = 2**61, 2**61 + 1000
    want = np.zeros(batches, np.int64)
    for k in range(batches):
        reach = None
        for lo, hi in sorted(zip(s[b == k].tolist(), e[b == k].tolist())):
            if reach is None or lo > reach:
                want[k] += hi - lo
                reach = hi
            elif hi > reach:
                want[k] += hi - reach
                reach = hi
    u = BatchUnion(batches)
    for i in range(0, n, 500):
        u.add(b[i:i + 500], s[i:i + 500], e[i:i + 500])
        u.merge(float(s[min(i + 500, n) - 1]) if i + 500 < n else float(s[-2]))
        if i == 1500:
            u.merge(float("-inf"))
    u.merge(float("inf"))
    assert u.ns.tolist() == want.tolist() and u.size == 0
