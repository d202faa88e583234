"""clef_prof.analyze.figures.metrics against independent oracles: `CudaTally`'s per-slot and per-(batch,
slot) counts, fed chunk by chunk as analyze feeds them, equal a plain Python loop over the rows
for any chunking (empty chunks, rows in no batch, byte sums past 2**53); `host_stats` and
`per_batch_durations` equal NumPy and dict computations; and on a real capture analyze's
per-batch table adds up to its per-stage figures."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.figures import cuda as cu
from clef_prof.analyze.read.columns import Table
from clef_prof.analyze.figures.metrics import BATCH_KEYS, CudaTally, host_stats, per_batch_durations
from clef_prof.analyze.figures.cuda_pass import MAX_COPY_BYTES
from clef_prof.analyze.pipeline import analyze

N_SLOTS, N_BATCHES = 7, 13
CALL_KEY = {cu.COPY: "memcpy_calls", cu.LAUNCH: "kernel_launches", cu.GRAPH: "graph_launches",
            cu.SET: "memset_calls", cu.SYNC: "sync_calls"}
SLOT_KEYS = ("h2d_copies", "h2d_bytes", "h2d_pageable", "h2d_pinned", "d2h_copies", "d2h_bytes", "d2h_pageable",
             "d2h_pinned", "memcpy_calls", "kernel_launches", "graph_launches", "memset_calls", "sync_calls",
             "device_syncs", "sync_memcpy_calls", "gpu_kernels", "graph_kernels", "graph_executions")


def _rows(rng, n_calls: int, n_copies: int, n_kernels: int, n_graphs: int, big_bytes: bool = False) -> dict:
    """Random rows of the four streams, dtypes as analyze passes them; batch -1 is a row in no batch."""
    def slot(n):
        return rng.integers(0, N_SLOTS, n)

    def batch(n):
        return np.where(rng.random(n) < 0.3, -1, rng.integers(0, N_BATCHES, n))

    lo = MAX_COPY_BYTES - (1 << 20) if big_bytes else 0
    return {
        "calls": dict(kind=rng.integers(0, 6, n_calls).astype(np.int8), slot=slot(n_calls), batch=batch(n_calls),
                      sync=rng.integers(0, 4, n_calls).astype(np.int8)),
        "copies": dict(slot=slot(n_copies), batch=batch(n_copies),
                       copy_kind=rng.choice([cu.HTOD, cu.DTOH, 0, 8, 10], n_copies),
                       src=rng.choice([cu.PAGEABLE, cu.PINNED, 2, 7], n_copies),
                       dst=rng.choice([cu.PAGEABLE, cu.PINNED, 2, 7], n_copies),
                       n=rng.choice([1, 1, 1, 2, 7], n_copies),
                       nbytes=rng.integers(lo, MAX_COPY_BYTES + 1, n_copies)),
        "kernels": dict(slot=slot(n_kernels), from_graph=rng.random(n_kernels) < 0.4),
        "graphs": dict(slot=slot(n_graphs)),
    }


def _loop(rows: dict, with_batch: bool = True) -> tuple[dict, dict]:
    """The counts by hand: one Python loop per stream, Python ints."""
    slot = {k: [0] * N_SLOTS for k in SLOT_KEYS}
    batch = {k: [[0] * N_SLOTS for _ in range(N_BATCHES)] for k in BATCH_KEYS}
    c = rows["calls"]
    for kd, s, b, sy in zip(*(c[k].tolist() for k in ("kind", "slot", "batch", "sync"))):
        if kd in CALL_KEY:
            slot[CALL_KEY[kd]][s] += 1
        if kd in (cu.LAUNCH, cu.GRAPH) and b >= 0 and with_batch:
            batch[CALL_KEY[kd]][b][s] += 1
        if sy == cu.DEVICE_SYNC:
            slot["device_syncs"][s] += 1
        if sy == cu.SYNC_COPY:
            slot["sync_memcpy_calls"][s] += 1
    c = rows["copies"]
    for s, b, ck, src, dst, n, nb in zip(*(c[k].tolist() for k in ("slot", "batch", "copy_kind", "src", "dst", "n",
                                                                     "nbytes"))):
        if ck not in (cu.HTOD, cu.DTOH):
            continue
        label, mem = ("h2d", src) if ck == cu.HTOD else ("d2h", dst)
        slot[f"{label}_copies"][s] += n
        slot[f"{label}_bytes"][s] += nb
        if mem == cu.PAGEABLE:
            slot[f"{label}_pageable"][s] += n
        if mem == cu.PINNED:
            slot[f"{label}_pinned"][s] += n
        if b >= 0 and with_batch:
            batch[f"{label}_copies"][b][s] += n
            batch[f"{label}_bytes"][b][s] += nb
    for s, g in zip(rows["kernels"]["slot"].tolist(), rows["kernels"]["from_graph"].tolist()):
        slot["gpu_kernels"][s] += 1
        slot["graph_kernels"][s] += g
    for s in rows["graphs"]["slot"].tolist():
        slot["graph_executions"][s] += 1
    return slot, batch


def _chunks(rng, stream: dict, pieces: int) -> list[dict]:
    """One stream's rows cut at random places (repeated cuts give empty chunks)."""
    n = len(next(iter(stream.values())))
    cuts = [0, *sorted(rng.integers(0, n + 1, pieces - 1).tolist()), n]
    return [{k: v[a:b] for k, v in stream.items()} for a, b in zip(cuts[:-1], cuts[1:])]


def _tally(rows: dict, rng, pieces: int, with_batch: bool = True, n_batches: int = N_BATCHES) -> CudaTally:
    """Feed the rows as analyze does: each call chunk to add_calls and add_syncs, each GPU chunk
    to its own method, the streams interleaved."""
    t = CudaTally(N_SLOTS, n_batches)
    streams = {k: _chunks(rng, v, pieces) for k, v in rows.items()}
    for i in range(pieces):
        c = streams["calls"][i]
        t.add_calls(c["kind"], c["slot"], c["batch"] if with_batch else None)
        t.add_syncs(c["sync"], c["slot"])
        c = streams["copies"][i]
        t.add_copies(c["slot"], c["batch"] if with_batch else None, c["copy_kind"], c["src"], c["dst"], c["n"],
                     c["nbytes"])
        c = streams["kernels"][i]
        t.add_kernels(c["slot"], c["from_graph"])
        t.add_graph_rows(streams["graphs"][i]["slot"])
    return t


def _assert_counts(t: CudaTally, slot: dict, batch: dict | None) -> None:
    counts = t.counts()
    assert list(counts) == list(SLOT_KEYS)
    for k in SLOT_KEYS:
        assert counts[k].dtype == np.int64 and counts[k].tolist() == slot[k], k
    for k in BATCH_KEYS:
        got = t.batch[k]
        assert got.dtype == np.int64 and got.shape == (t.n_batches, N_SLOTS), k
        assert got.tolist() == (batch[k] if batch is not None else np.zeros_like(got).tolist()), k
    assert not t.batch["gpu_own_ns"].any()       # set by the GPU pass, not by any count


@pytest.mark.parametrize("seed", range(4))
def test_tally_equals_loop_for_any_chunking(seed):
    rng = np.random.default_rng(seed)
    rows = _rows(rng, 3000, 1500, 2000, 300)
    slot, batch = _loop(rows)
    assert sum(map(sum, slot.values())) and sum(x for k in batch for r in batch[k] for x in r)
    for pieces in (1, 2, 17, 200):
        _assert_counts(_tally(rows, rng, pieces), slot, batch)


def test_tally_of_rows_one_by_one():
    rng = np.random.default_rng(5)
    rows = _rows(rng, 150, 120, 100, 30)
    t = CudaTally(N_SLOTS, N_BATCHES)
    for i in range(150):
        t.add_calls(rows["calls"]["kind"][i:i + 1], rows["calls"]["slot"][i:i + 1], rows["calls"]["batch"][i:i + 1])
        t.add_syncs(rows["calls"]["sync"][i:i + 1], rows["calls"]["slot"][i:i + 1])
    for i in range(120):
        t.add_copies(*(rows["copies"][k][i:i + 1] for k in ("slot", "batch", "copy_kind", "src", "dst", "n", "nbytes")))
    for i in range(100):
        t.add_kernels(rows["kernels"]["slot"][i:i + 1], rows["kernels"]["from_graph"][i:i + 1])
    for i in range(30):
        t.add_graph_rows(rows["graphs"]["slot"][i:i + 1])
    _assert_counts(t, *_loop(rows))


def test_rows_in_no_batch_count_in_their_slot_only():
    """Rows all outside every batch (batch -1): the slot counts have them, no batch cell does."""
    rng = np.random.default_rng(6)
    rows = _rows(rng, 500, 400, 10, 10)
    for stream in ("calls", "copies"):
        rows[stream]["batch"] = np.full(len(rows[stream]["batch"]), -1)
    slot, batch = _loop(rows)
    assert slot["kernel_launches"] != [0] * N_SLOTS and slot["h2d_bytes"] != [0] * N_SLOTS
    assert all(x == 0 for k in batch for r in batch[k] for x in r)
    _assert_counts(_tally(rows, rng, 5), slot, batch)


def test_without_batches_only_slots_count():
    """No batch column (None), or a capture without batches (0 of them): slot counts only."""
    rng = np.random.default_rng(7)
    rows = _rows(rng, 800, 600, 300, 40)
    slot, _ = _loop(rows)
    _assert_counts(_tally(rows, rng, 6, with_batch=False), slot, None)
    for stream in ("calls", "copies"):
        rows[stream]["batch"] = np.full(len(rows[stream]["batch"]), -1)
    _assert_counts(_tally(rows, rng, 6, n_batches=0), slot, None)


def test_empty_chunks_count_nothing():
    rng = np.random.default_rng(8)
    empty = _rows(rng, 0, 0, 0, 0)
    t = _tally(empty, rng, 3)
    _assert_counts(t, *_loop(empty))
    assert not any(v.any() for v in t.counts().values())


def test_bytes_past_2_53_summed_exactly():
    """Copies of nearly the largest byte count analyze takes, in two slots and one batch, fed in
    60 chunks: each slot's and cell's byte total runs past 2**53 (a float64 sum would lose the
    low bits) and stays exact."""
    rng = np.random.default_rng(9)
    n = 60_000
    rows = _rows(rng, 0, n, 0, 0, big_bytes=True)
    rows["copies"].update(copy_kind=rng.choice([cu.HTOD, cu.DTOH], n), slot=rng.integers(0, 2, n),
                          batch=np.where(rng.random(n) < 0.1, -1, 0))
    slot, batch = _loop(rows)
    assert min(slot["h2d_bytes"][:2] + slot["d2h_bytes"][:2]) > 2**53
    assert min(batch["h2d_bytes"][0][:2] + batch["d2h_bytes"][0][:2]) > 2**53
    _assert_counts(_tally(rows, rng, 60), slot, batch)


# --- host_stats, per_batch_durations ---------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 100, 1001])
def test_host_stats_equal_numpy(n):
    d = np.random.default_rng(n).integers(0, 5 * 10**9, n)
    ms = d / 1e6
    got = host_stats(d)
    assert got["host_ms_mean"] == pytest.approx(float(np.mean(ms)), rel=1e-12)
    assert (got["host_ms_p50"], got["host_ms_p99"]) == (float(np.percentile(ms, 50)), float(np.percentile(ms, 99)))


def test_host_stats_of_nothing():
    assert host_stats(np.zeros(0, np.int64)) == {"host_ms_mean": None, "host_ms_p50": None, "host_ms_p99": None}


@pytest.mark.parametrize("seed", range(3))
def test_per_batch_durations_equal_dict_sums(seed):
    """Stage `code`'s instances summed per batch, in batch order (batches without one left out),
    then the instances in no batch one by one, in their order."""
    rng = np.random.default_rng(seed)
    n = 2000
    start = rng.integers(0, 10**12, n)
    inst = Table(code=rng.integers(0, 4, n), start=start, end=start + rng.integers(0, 10**8, n),
                 batch=np.where(rng.random(n) < 0.2, -1, rng.integers(0, 300, n)))
    for code in range(5):
        per: dict[int, int] = {}
        free = []
        for c, s, e, b in zip(*(inst[k].tolist() for k in ("code", "start", "end", "batch"))):
            if c != code:
                continue
            if b >= 0:
                per[b] = per.get(b, 0) + e - s
            else:
                free.append(e - s)
        want = [per[b] for b in sorted(per)] + free
        got = per_batch_durations(inst, code)
        assert got.dtype == np.int64 and got.tolist() == want, code


def test_per_batch_durations_of_no_instance():
    inst = Table(code=np.zeros(0, np.int64), start=np.zeros(0, np.int64), end=np.zeros(0, np.int64),
                 batch=np.zeros(0, np.int64))
    assert per_batch_durations(inst, 0).tolist() == []


# --- a real capture ------------------------------------------------------------------------------

def test_per_batch_table_adds_up_to_the_stage_figures(capture):
    """gpu-q1c16-main (every stage instance in a batch): each count of the per-batch table, summed
    over batches, is the batch range's figure; each stage's column summed is the stage's figure;
    what no stage holds is the batch range's work outside stages."""
    a = analyze(str(capture("gpu-q1c16-main")))
    r, pb = a.result, a.batch_table
    assert r.excluded.outside_batch_instances == 0 and len(pb) == r.batches > 0
    assert r.pooler.cuda.kernel_launches > 0 and r.pooler.cuda.h2d_copies > 0 and r.pooler.cuda.graph_launches > 0
    for key in BATCH_KEYS:
        total = int(pb[key].sum())
        assert total == getattr(r.pooler.cuda, key), key
        by_stage = {s: int(pb[f"{s}_{key}"].sum()) for s in r.config.stages}
        assert by_stage == {s: getattr(f.cuda, key) for s, f in r.stages.items()}, key
        assert total - sum(by_stage.values()) == getattr(r.outside_stages.in_batch, key), key
        assert getattr(r.totals, key) == total + getattr(r.outside_stages.outside_batch, key), key


# --- stage names, ratios -------------------------------------------------------------------------

@pytest.mark.parametrize("name, column", [("host", "host_ns"), ("gpu_busy", "gpu_busy_ns"), ("gpu_own", "gpu_own_ns")])
def test_a_stage_name_that_would_overwrite_a_batch_column_is_refused(name, column):
    """The per-batch table holds `<stage>_ns` beside the batch's own `host_ns`, `gpu_busy_ns` and
    `gpu_own_ns`: a stage named host, gpu_busy or gpu_own would overwrite one of them."""
    from clef_prof.analyze.figures.metrics import check_stage_names
    from clef_prof.base.errors import SpecError

    with pytest.raises(SpecError, match=f"stage name '{name}' clashes with the per-batch column '{column}'"):
        check_stage_names(("parse", name))
    check_stage_names(("parse", "index", "transfer", "head", "encode", "hosts", "gpu", "own"))


def test_a_clashing_stage_name_is_refused_by_analyze(capture):
    """gpu25-bertsrv with its `head` stage read under the name `host` (a target by message)."""
    from clef_prof.annotate.spec import from_dict
    from clef_prof.base.errors import SpecError

    spec = from_dict({"batch": {}, "stages": {"parse": "m:parse", "host": "m:head"}})
    with pytest.raises(SpecError, match="'host' clashes with the per-batch column 'host_ns'"):
        analyze(str(capture("gpu25-bertsrv")), spec.config)


@pytest.mark.parametrize("a, b, want", [(3, 2, 1.5), (0, 2, 0.0), (3, 0, None), (3, None, None), (None, 2, None),
                                        (0.0, 0.0, None)])
def test_safe_div(a, b, want):
    from clef_prof.analyze.figures.metrics import safe_div

    assert safe_div(a, b) == want


def test_per_batch_stage_ns_and_gpu_busy_against_sql(capture):
    """gpu-q1c16-main, batch by batch (one batch at a time, one process): each stage's host ns is the
    summed length of its ranges inside the batch range (SQL), and `gpu_busy_ns` the ns of the batch
    range during which a kernel or a copy ran (the GPU intervals merged by hand, then clipped)."""
    from conftest import loop_union, sql

    path = capture("gpu-q1c16-main")
    a = analyze(str(path))
    pb = a.batch_table
    order = np.argsort(pb["start"], kind="stable")
    batches = sql(path, "SELECT start, [end] FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' ORDER BY start")
    assert pb["start"][order].tolist() == [s for s, _ in batches] and len(batches) == 282
    per = ("SELECT p.start, COALESCE(SUM(t.[end] - t.start), 0) FROM NVTX_EVENTS p LEFT JOIN (SELECT e.globalTid, "
           "e.start, e.[end] FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = ?) t "
           "ON t.globalTid = p.globalTid AND t.start >= p.start AND t.[end] <= p.[end] "
           "WHERE p.text LIKE 'pooler n=%' GROUP BY p.rowid ORDER BY p.start")
    for stage in a.result.config.stages:
        want = [ns for _, ns in sql(path, per, stage)]
        assert pb[f"{stage}_ns"][order].tolist() == want, stage
        assert want[0] > 0, stage                               # the first batch's stages count too
    gpu = sql(path, "SELECT start, [end] FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                    "SELECT start, [end] FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY 1")
    ms, me = np.array(loop_union(*zip(*gpu)), dtype=np.int64).T
    busy = [int(np.clip(np.minimum(me, be) - np.maximum(ms, bs), 0, None).sum()) for bs, be in batches]
    assert pb["gpu_busy_ns"][order].tolist() == busy
    assert 0 < sum(busy) < sum(be - bs for bs, be in batches)
