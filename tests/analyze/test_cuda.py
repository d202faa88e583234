"""clef_prof.analyze.figures.cuda's pure parts against independent oracles: `CallIndex` (GPU row ->
API call, on (process, correlationId)) against Python dicts on seeded random calls in random
chunkings, and against a SQL JOIN on real captures; `KindLookup` against a dict; `api_kind` and
`sync_kind` against what the CUDA API names mean; `kind_lut` and the sync counts of `analyze`
against the API names of real captures read with sqlite3."""
from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from clef_prof.analyze.figures import cuda as cu
from clef_prof.analyze.figures.cuda import CallIndex, KindLookup, api_kind, sync_kind
from clef_prof.analyze.read.export import Export
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.errors import CaptureError
from conftest import edited_copy, sql

I64 = np.iinfo(np.int64)


# --- CallIndex against dicts ------------------------------------------------------------------

def _oracle(corr: np.ndarray, pk: np.ndarray) -> tuple[dict, dict]:
    """{(pk, corr): first call}, {corr: first call}: a key held by several calls pairs with the first."""
    by_key: dict = {}
    by_corr: dict = {}
    for i, (c, p) in enumerate(zip(corr.tolist(), pk.tolist())):
        by_key.setdefault((p, c), i)
        by_corr.setdefault(c, i)
    return by_key, by_corr


def _cuts(rng, n: int, chunks: int) -> list[int]:
    """Chunk boundaries over n rows; repeated boundaries make empty chunks."""
    return [0, *sorted(rng.integers(0, n + 1, chunks - 1).tolist()), n]


def _build(corr: np.ndarray, pk: np.ndarray, cuts: list[int]) -> CallIndex:
    index = CallIndex()
    for a, b in zip(cuts[:-1], cuts[1:]):
        index.add(corr[a:b], pk[a:b])
    index.freeze()
    return index


PIDS = np.array([0x1000267, 0x1000268, 0x2000001, 5, 0], dtype=np.int64)


def _calls(rng, case: str, n: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(correlationIds, process keys, chunk boundaries) of n calls shaped as `case` says."""
    cuts = _cuts(rng, n, int(rng.integers(1, 9)))
    one = np.full(n, PIDS[0])
    if case == "rising, one process":              # what nsys writes: sorted, no index needed
        return 1000 + np.cumsum(rng.integers(0, 3, n)), one, cuts
    if case == "shuffled, one process, duplicates":
        return rng.integers(0, n // 4 + 1, n), one, cuts
    if case == "processes mixed in every chunk":   # the same ids in several processes
        return rng.integers(0, n // 3 + 1, n), rng.choice(PIDS[:3], n), cuts
    if case == "one process per chunk":            # chunks of one process each (no per-row codes)
        pk = np.concatenate([np.full(b - a, PIDS[i % 4]) for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))])
        return rng.integers(-50, n // 2, n), pk, cuts
    if case == "negative":
        return rng.integers(-(n // 2), 3, n), rng.choice(PIDS[:2], n), cuts
    if case == "span beyond uint32 in a chunk":
        return rng.integers(-(1 << 40), 1 << 40, n), rng.choice(PIDS[:2], n), cuts
    if case == "chunks far apart":                  # each chunk's span small, the whole one not
        corr = np.concatenate([(i * 7 - 20) * (1 << 36) + rng.integers(0, 100, b - a)
                               for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))])
        return corr, rng.choice(PIDS[:2], n), cuts
    raise ValueError(case)


CASES = ["rising, one process", "shuffled, one process, duplicates", "processes mixed in every chunk",
         "one process per chunk", "negative", "span beyond uint32 in a chunk", "chunks far apart"]


def _queries(rng, corr: np.ndarray, pk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (pk, corr) held, ids next to them and at the ends (held or not), every known process
    with ids of the others, a process not held, and int64's extremes; shuffled."""
    lo, hi = int(corr.min()), int(corr.max())
    extra = np.concatenate([corr - 1, corr + 1, [lo - 1, hi + 1, lo, hi, I64.min, I64.max, I64.min + 1, I64.max - 1]])
    qc = np.concatenate([corr, extra, rng.choice(corr, len(corr)), rng.choice(corr, 50)])
    qp = np.concatenate([pk, rng.choice(PIDS, len(extra)), rng.choice(PIDS[:3], len(corr)), np.full(50, 999)])
    order = rng.permutation(len(qc))
    return qc[order].astype(np.int64), qp[order].astype(np.int64)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", CASES)
def test_call_index_equals_dict_oracle(case, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    corr, pk, cuts = _calls(rng, case, n)
    index = _build(corr, pk, cuts)
    by_key, by_corr = _oracle(corr, pk)
    qc, qp = _queries(rng, corr, pk)

    got = index.lookup(qc, qp)
    want = [by_key.get((p, c), -1) for p, c in zip(qp.tolist(), qc.tolist())]
    assert got.dtype == np.int64 and got.tolist() == want

    got = index.lookup(qc)
    assert got.tolist() == [by_corr.get(c, -1) for c in qc.tolist()]

    for p in np.unique(qp).tolist():            # one process in the whole query
        got = index.lookup(qc, np.full(len(qc), p))
        assert got.tolist() == [by_key.get((p, c), -1) for c in qc.tolist()], p

    for c, p in zip(qc[:25].tolist(), qp[:25].tolist()):    # one id at a time
        assert index.lookup(np.array([c]), np.array([p])).tolist() == [by_key.get((p, c), -1)]
        assert index.lookup(np.array([c])).tolist() == [by_corr.get(c, -1)]


@pytest.mark.parametrize("case", CASES)
def test_call_index_same_for_any_chunking(case):
    """The calls added in one chunk, one by one, or in random chunks give the same pairing."""
    rng = np.random.default_rng(11)
    corr, pk, cuts = _calls(rng, case, 400)
    qc, qp = _queries(rng, corr, pk)
    whole = _build(corr, pk, [0, len(corr)]).lookup(qc, qp)
    assert (whole >= 0).sum() > len(corr) // 2
    assert np.array_equal(_build(corr, pk, list(range(len(corr) + 1))).lookup(qc, qp), whole)
    assert np.array_equal(_build(corr, pk, cuts).lookup(qc, qp), whole)


def test_call_index_first_call_wins_and_processes_apart():
    index = _build(np.array([7, 9, 7, 7, 9]), np.array([1, 1, 2, 1, 2]), [0, 2, 3, 5])
    assert index.lookup(np.array([7, 9, 7, 9, 8])).tolist() == [0, 1, 0, 1, -1]
    assert index.lookup(np.array([7, 9, 7, 9, 7]), np.array([2, 2, 1, 1, 3])).tolist() == [2, 4, 0, 1, -1]


def test_call_index_chunk_spanning_exactly_2_to_the_32():
    """A chunk whose ids span 2**32 does not fit uint32 offsets (its last would wrap to 0)."""
    corr = np.array([5, 6, 5 + (1 << 32)])
    index = _build(corr, np.full(3, 3), [0, 3])
    assert index.lookup(corr).tolist() == [0, 1, 2]
    assert index.lookup(np.array([4, 5 + (1 << 32) - 1, 6 + (1 << 32)])).tolist() == [-1, -1, -1]


def test_call_index_chunks_far_apart_keep_their_ids():
    """Chunks whose own spans fit uint32 but not together: the whole index holds int64 ids
    (freeze raised OverflowError under NumPy 2 once)."""
    index = _build(np.array([5, 6, (1 << 40) + 5, (1 << 40) + 6]), np.full(4, 3), [0, 2, 4])
    assert index.corr.dtype == np.int64
    q = np.array([5, 6, (1 << 40) + 5, (1 << 40) + 6, (1 << 40) + 7, 4, (1 << 32) + 5])
    assert index.lookup(q).tolist() == [0, 1, 2, 3, -1, -1, -1]
    assert index.lookup(q, np.full(len(q), 3)).tolist() == [0, 1, 2, 3, -1, -1, -1]


def test_call_index_empty():
    """No calls (never added, or only empty chunks): every lookup misses; no query: no answer."""
    never = CallIndex()
    never.freeze()
    only_empty = _build(np.zeros(0, np.int64), np.zeros(0, np.int64), [0, 0, 0])
    q = np.array([0, 1, -1, I64.max])
    for index in (never, only_empty):
        assert index.n == 0
        assert index.lookup(q).tolist() == [-1] * 4
        assert index.lookup(q, np.zeros(4, np.int64)).tolist() == [-1] * 4
    full = _build(np.array([1, 2]), np.array([4, 4]), [0, 2])
    for index in (never, full):
        assert index.lookup(np.zeros(0, np.int64)).shape == (0,)
        assert index.lookup(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)


def test_call_index_takes_any_int_width():
    """int32 and uint32 ids and pks as the readers give them pair as int64 ones do."""
    corr = np.array([4_000_000_000, 3, 4_000_000_001, 3], dtype=np.uint32)
    pk = np.array([1, 1, 2, 2], dtype=np.int32)
    index = _build(corr, pk, [0, 1, 4])
    q = np.array([3, 4_000_000_001, 4_000_000_000, 3], dtype=np.uint32)
    assert index.lookup(q, np.array([2, 2, 2, 1], dtype=np.int16)).tolist() == [3, 2, -1, 1]
    assert index.lookup(q.astype(np.int64)).tolist() == [1, 2, 0, 1]


# --- CallIndex against SQL on real captures -------------------------------------------------------

RUNTIME_SQL = f"SELECT correlationId, globalTid >> 24 FROM {cu.RUNTIME} ORDER BY rowid"
# each GPU row's call: the first runtime row (0-based, in rowid order) of its process and correlationId
PAIRED_SQL = """
WITH r AS (SELECT row_number() OVER (ORDER BY rowid) - 1 AS i, correlationId AS corr, globalTid >> 24 AS pk
           FROM {runtime}),
     first AS (SELECT corr, pk, min(i) AS i FROM r GROUP BY corr, pk)
SELECT g.correlationId, g.globalPid >> 24, COALESCE(f.i, -1)
FROM {gpu} g LEFT JOIN first f ON f.corr = g.correlationId AND f.pk = g.globalPid >> 24 ORDER BY g.rowid"""


def _sql_pairs(path, table: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(PAIRED_SQL.format(runtime=cu.RUNTIME, gpu=table)).fetchall()
    return tuple(np.array(rows, dtype=np.int64).reshape(-1, 3).T)


def _runtime(path) -> tuple[np.ndarray, np.ndarray]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = np.array(db.execute(RUNTIME_SQL).fetchall(), dtype=np.int64)
    return rows[:, 0], rows[:, 1]


def test_every_kernel_and_copy_pairs_as_a_sql_join(capture):
    """gpu-q1c16-main: the runtime calls added in uneven chunks; each kernel and memcpy row pairs
    with the call the JOIN on (correlationId, globalPid >> 24) finds, and every one has one."""
    path = capture("gpu-q1c16-main")
    corr, pk = _runtime(path)
    n = len(corr)
    index = _build(corr, pk, [0, 1, 777, n // 3, n // 3, n - 5, n])
    # compact, as the class says: 4-byte ids (their span fits), no per-call process code (one process)
    assert index.corr.dtype == np.uint32 and index.pkc is None and len(np.unique(pk)) == 1
    for table in (cu.KERNEL, cu.MEMCPY):
        gcorr, gpk, want = _sql_pairs(path, table)
        assert len(want) > 10_000 and (want >= 0).all(), table
        assert np.array_equal(index.lookup(gcorr, gpk), want), table
        assert np.array_equal(index.lookup(gcorr), want), table          # one process: pk changes nothing
        assert (index.lookup(gcorr, gpk + 1) == -1).all(), table          # another process has none of them


def test_two_captures_as_two_processes(capture):
    """The calls of two captures (main, pr: two processes whose correlationIds overlap) in one
    index: each GPU row pairs with its own process's call; on the id alone, with the first
    capture's call where both hold the id."""
    a, b = capture("gpu-q1c16-main"), capture("gpu-q1c16-pr")
    (ca, pa), (cb, pb) = _runtime(a), _runtime(b)
    assert pa[0] != pb[0] and len(np.intersect1d(ca, cb)) > 1000
    index = _build(np.concatenate([ca, cb]), np.concatenate([pa, pb]), [0, len(ca) // 2, len(ca), len(ca) + 10,
                                                                        len(ca) + len(cb)])
    first_a = {c: i for i, c in reversed(list(enumerate(ca.tolist())))}
    for table in (cu.KERNEL, cu.MEMCPY):
        gcorr, gpk, want = _sql_pairs(a, table)
        assert np.array_equal(index.lookup(gcorr, gpk), want), table
        gcorr, gpk, want = _sql_pairs(b, table)
        assert (want >= 0).all()
        assert np.array_equal(index.lookup(gcorr, gpk), want + len(ca)), table
        on_id = [first_a.get(c, -1) for c in gcorr.tolist()]
        on_id = np.where(np.array(on_id) >= 0, on_id, want + len(ca))
        assert np.array_equal(index.lookup(gcorr), on_id), table


# --- KindLookup, api_kind, sync_kind ------------------------------------------------------------------

@pytest.mark.parametrize("keys", ["dense", "dense from id 0", "sparse beyond 2**24", "negative", "one", "none"])
def test_kind_lookup_equals_dict(keys):
    """Ids in 0 .. 2**24 (StringIds ids start at 0) get the dense table, others the sorted one."""
    rng = np.random.default_rng(3)
    ids = {"dense": rng.choice(5000, 300, replace=False), "dense from id 0": [0, 1, 4, 9, (1 << 24) - 1],
           "sparse beyond 2**24": rng.integers(0, 1 << 40, 300), "negative": rng.integers(-1000, 1000, 300),
           "one": [17], "none": []}[keys]
    kinds = {int(i): int(rng.integers(1, 6)) for i in ids}
    lut = KindLookup(kinds)
    assert (lut.dense is not None) == keys.startswith(("dense", "one"))
    held = np.array(list(kinds), dtype=np.int64)
    q = np.concatenate([held, held + 1, held - 1, rng.integers(-10, 6000, 500), [0, -1, 1 << 24, 1 << 41, I64.min,
                                                                                  I64.max]]).astype(np.int64)
    got = lut(q)
    assert got.dtype == np.int8 and got.tolist() == [kinds.get(i, 0) for i in q.tolist()]
    for i in q[:20].tolist():                   # one id at a time
        assert lut(np.array([i])).tolist() == [kinds.get(i, 0)]
    assert lut(np.zeros(0, np.int64)).shape == (0,)


def test_kind_lookup_ids_past_the_last_key_are_of_no_kind():
    """The sync lookup holds only the sync APIs' ids; a launch interned after the last of them is
    not a sync (it once took that API's kind)."""
    lut = KindLookup({3: cu.SYNC_COPY, 5: cu.DEVICE_SYNC})
    assert lut(np.array([3, 4, 5, 6, 100, -1, 0])).tolist() == [cu.SYNC_COPY, 0, cu.DEVICE_SYNC, 0, 0, 0, 0]


# (name, api_kind, sync_kind): launches and graph launches of the runtime and driver APIs; copies
# and sets by prefix, synchronous unless the name says Async; syncs of a stream or event, or of
# the whole device/context; ABI suffixes (_v<N>, per-thread default stream _ptsz/_ptds) ignored
NAMES = [
    ("cudaLaunchKernel_v7000", cu.LAUNCH, 0), ("cudaLaunchKernel_ptsz", cu.LAUNCH, 0),
    ("cudaLaunchKernelExC_v11060", cu.LAUNCH, 0), ("cudaLaunchCooperativeKernel_v9000_ptsz", cu.LAUNCH, 0),
    ("cuLaunchKernel", cu.LAUNCH, 0), ("cuLaunchKernelEx", cu.LAUNCH, 0), ("cuLaunchGridAsync", cu.LAUNCH, 0),
    ("cudaLaunchCooperativeKernelMultiDevice_v9000", cu.LAUNCH, 0), ("cuLaunchCooperativeKernel", cu.LAUNCH, 0),
    ("cuLaunchCooperativeKernel_ptsz", cu.LAUNCH, 0), ("cuLaunchCooperativeKernelMultiDevice", cu.LAUNCH, 0),
    ("cuLaunchGrid", cu.LAUNCH, 0), ("cuLaunchKernel_ptsz", cu.LAUNCH, 0), ("cuLaunchKernelEx_ptsz", cu.LAUNCH, 0),
    ("cudaGraphLaunch_v10000", cu.GRAPH, 0), ("cuGraphLaunch_ptsz", cu.GRAPH, 0),
    ("cudaMemcpyAsync_v3020", cu.COPY, 0), ("cudaMemcpyAsync_ptsz", cu.COPY, 0),
    ("cudaMemcpy2DAsync_v3020", cu.COPY, 0), ("cuMemcpyHtoDAsync_v2", cu.COPY, 0),
    ("cudaMemcpy_v3020", cu.COPY, cu.SYNC_COPY), ("cudaMemcpyToSymbol_v3020", cu.COPY, cu.SYNC_COPY),
    ("cuMemcpyDtoH_v2", cu.COPY, cu.SYNC_COPY), ("cudaMemcpy_ptds", cu.COPY, cu.SYNC_COPY),
    ("cudaMemsetAsync_v3020", cu.SET, 0), ("cuMemsetD32_v2", cu.SET, 0),
    ("cudaStreamSynchronize_v3020", cu.SYNC, cu.STREAM_SYNC), ("cudaStreamSynchronize_ptsz", cu.SYNC, cu.STREAM_SYNC),
    ("cudaEventSynchronize_v3020", cu.SYNC, cu.STREAM_SYNC), ("cuStreamSynchronize", cu.SYNC, cu.STREAM_SYNC),
    ("cuStreamSynchronize_ptsz", cu.SYNC, cu.STREAM_SYNC), ("cuEventSynchronize", cu.SYNC, cu.STREAM_SYNC),
    ("cudaDeviceSynchronize_v3020", cu.SYNC, cu.DEVICE_SYNC), ("cudaThreadSynchronize_v3020", cu.SYNC, cu.DEVICE_SYNC),
    ("cuCtxSynchronize", cu.SYNC, cu.DEVICE_SYNC),
    ("cudaMalloc_v3020", 0, 0), ("cudaStreamWaitEvent_v3020", 0, 0), ("cudaLaunchHostFunc_v10000", 0, 0),
    ("cudaEventRecord_v3020", 0, 0), ("cudaGraphInstantiate_v10000", 0, 0), ("cuModuleLoadData", 0, 0),
    ("cudaLaunchKernelFoo", 0, 0), ("cudaStreamSynchronizeX", 0, 0),
]


@pytest.mark.parametrize("name,kind,sync", NAMES)
def test_api_and_sync_kind_of_names(name, kind, sync):
    assert (api_kind(name), sync_kind(name)) == (kind, sync)


# --- kind_lut and the sync counts on real captures ------------------------------------------------------

NAMES_SQL = f"SELECT DISTINCT s.id, s.value FROM {cu.RUNTIME} r JOIN StringIds s ON s.id = r.nameId"


@pytest.mark.parametrize("name", ["gpu-q1c16-main", "gpu25-sync-slice"])
def test_kind_lut_classifies_every_api_name(capture, name):
    """Every nameId of the runtime table: its kind and sync kind as its name says; the ids of
    interest are those of some kind."""
    path = capture(name)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        names = dict(db.execute(NAMES_SQL).fetchall())
    with Export.open(path) as cap:
        lut, wanted = cu.kind_lut(cap)
    ids = np.array(sorted(names), dtype=np.int64)
    assert lut(ids).tolist() == [api_kind(names[i]) for i in ids.tolist()]
    assert lut.sync(ids).tolist() == [sync_kind(names[i]) for i in ids.tolist()]
    assert set(wanted) >= {i for i, v in names.items() if api_kind(v)}


def test_sync_counts_when_a_blocking_copy_is_interned_before_the_launches(capture, tmp_path):
    """gpu25-sync-slice with its cudaStreamSynchronize renamed cudaMemcpy (a blocking copy whose
    name id is below the launches'): analyze's totals count each API as a plain SQL count of its
    name's rows does."""
    path = tmp_path / "renamed.sqlite"
    shutil.copyfile(capture("gpu25-sync-slice"), path)
    path.chmod(0o644)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE StringIds SET value = 'cudaMemcpy_v3020' WHERE value = 'cudaStreamSynchronize_v3020'")
        assert db.total_changes == 1
        rows = db.execute(f"SELECT s.value, count(*) FROM {cu.RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
                          "GROUP BY s.value").fetchall()
    db.close()

    def count(pred) -> int:
        return sum(n for v, n in rows if pred(v))

    totals = analyze(str(path)).result.totals
    assert totals.sync_memcpy_calls == count(lambda v: sync_kind(v) == cu.SYNC_COPY) > 0
    assert totals.device_syncs == count(lambda v: sync_kind(v) == cu.DEVICE_SYNC)
    assert totals.memcpy_calls == count(lambda v: api_kind(v) == cu.COPY)
    assert totals.kernel_launches == count(lambda v: api_kind(v) == cu.LAUNCH) > 0
    assert totals.sync_calls == count(lambda v: api_kind(v) == cu.SYNC)


# --- check_schema and cuda_traced on damaged copies of real captures ------------------------------------

GPU_TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({})".format(
    ", ".join(f"'{t}'" for t in (cu.MEMCPY, cu.KERNEL, cu.MEMSET, cu.GRAPH_TRACE)))
# (capture, table, column): every column the figures are made of, in a capture that has the table
REQUIRED = [("gpu25-concurrent", cu.RUNTIME, c) for c in ("start", "end", "globalTid", "correlationId", "nameId")]
REQUIRED += [("gpu25-concurrent", cu.MEMCPY, c) for c in ("start", "end", "correlationId", "bytes", "copyKind")]
REQUIRED += [("gpu25-concurrent", cu.KERNEL, c) for c in ("start", "end", "correlationId")]
REQUIRED += [("gpu25-q1c16-pr", cu.GRAPH_TRACE, c) for c in ("start", "end", "correlationId")]


@pytest.mark.parametrize("name,table,col", REQUIRED, ids=[f"{t[20:]}.{c}" for _, t, c in REQUIRED])
def test_a_renamed_required_column_is_refused(capture, tmp_path, name, table, col):
    path = edited_copy(capture(name), tmp_path / "renamed.sqlite",
                       f'ALTER TABLE {table} RENAME COLUMN "{col}" TO "{col}_renamed"')
    with pytest.raises(CaptureError, match=f"{table} has no column {col}"):
        analyze(str(path))


def test_no_string_table_is_refused(capture, tmp_path):
    path = edited_copy(capture("gpu25-concurrent"), tmp_path / "nostrings.sqlite", "DROP TABLE StringIds")
    with pytest.raises(CaptureError, match="no StringIds table: CUDA API names cannot be resolved"):
        analyze(str(path))


@pytest.mark.parametrize("name", ["gpu25-concurrent", "gpu25-q1c16-pr"])
def test_gpu_activity_without_its_api_calls_is_refused(capture, tmp_path, name):
    """The runtime table dropped: the GPU tables left (as sqlite_master lists them) are named, in
    a refusal rather than figures of zero launches."""
    path = edited_copy(capture(name), tmp_path / "noapi.sqlite", f"DROP TABLE {cu.RUNTIME}")
    gpu = {r[0] for r in sql(path, GPU_TABLES_SQL)}
    assert cu.KERNEL in gpu and cu.MEMCPY in gpu
    with pytest.raises(CaptureError, match=f"but no {cu.RUNTIME} table") as err:
        analyze(str(path))
    listed = str(err.value).split("GPU activity (", 1)[1].split(")", 1)[0].split(", ")
    assert sorted(listed) == sorted(gpu)


def test_no_cuda_tables_reads_as_not_traced(capture, tmp_path):
    """Every CUDA table dropped from a capture recorded with CUDA trace on: no CUDA figures and the
    'made no CUDA calls' warning, not a refusal and not zeros."""
    src = capture("gpu25-concurrent")
    assert sql(src, "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%COLLECT_CUDA_TRACE'") == [("true",)]
    tables = [r[0] for r in sql(src, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'CUPTI%'")]
    path = edited_copy(src, tmp_path / "nocuda.sqlite", *(f"DROP TABLE {t}" for t in tables))
    with Export.open(path) as cap:
        assert not cu.cuda_traced(cap) and cu.graph_trace_mode(cap) is None and cu.last_api_end(cap) is None
        assert cu.call_queries(cap, [1, 2]) == [] and all(cu.gpu_queries(cap, t) == [] for t in cu.GPU_TABLES)
    r = analyze(str(path)).result
    assert any("CUDA was traced but the program made no CUDA calls" in w for w in r.warnings)
    assert r.totals.kernel_launches is None


# the CUDA APIs by what they wait for (the CUDA reference), as SQL over StringIds' names
_IS = "s.value LIKE '{}%'"
DEVICE_SYNC_SQL = " OR ".join(_IS.format(n) for n in ("cudaDeviceSynchronize", "cudaThreadSynchronize",
                                                          "cuCtxSynchronize"))
STREAM_SYNC_SQL = " OR ".join(_IS.format(n) for n in ("cudaStreamSynchronize", "cudaEventSynchronize",
                                                          "cuStreamSynchronize", "cuEventSynchronize"))
BLOCKING_COPY_SQL = "(s.value LIKE 'cudaMemcpy%' OR s.value LIKE 'cuMemcpy%') AND s.value NOT LIKE '%Async%'"
COUNT_SQL = f"SELECT count(*) FROM {cu.RUNTIME} r JOIN StringIds s ON s.id = r.nameId WHERE {{}}"


@pytest.mark.parametrize("name", ["gpu25-q1c16-pr", "gpu25-sync-slice", "gpu-q1c16-main"])
def test_device_and_stream_syncs_counted_apart(capture, name):
    """gpu25-q1c16-pr holds one cudaDeviceSynchronize among 277 cudaStreamSynchronize: the device
    syncs are the device-wide ones only, the sync calls both kinds."""
    path = capture(name)
    device, stream, blocking = (sql(path, COUNT_SQL.format(w))[0][0]
                                for w in (DEVICE_SYNC_SQL, STREAM_SYNC_SQL, BLOCKING_COPY_SQL))
    assert stream > 0
    totals = analyze(str(path)).result.totals
    assert (totals.device_syncs, totals.sync_calls, totals.sync_memcpy_calls) == (device, device + stream, blocking)


# --- memsets: no real capture has them; gpu25-concurrent's H2D copies turned into memsets --------------

MEMSET_DDL = (f"CREATE TABLE {cu.MEMSET} (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
              "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, "
              "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, "
              "memKind INTEGER)")
TO_MEMSETS = (
    MEMSET_DDL,
    f"INSERT INTO {cu.MEMSET} SELECT start, end, deviceId, contextId, greenContextId, streamId, correlationId, "
    f"globalPid, 0, bytes, graphNodeId, dstKind FROM {cu.MEMCPY} WHERE copyKind = 1",
    f"DELETE FROM {cu.MEMCPY} WHERE copyKind = 1",
    "INSERT INTO StringIds (id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), 'cudaMemsetAsync_v3020')",
    f"UPDATE {cu.RUNTIME} SET nameId = (SELECT id FROM StringIds WHERE value = 'cudaMemsetAsync_v3020') "
    f"WHERE correlationId IN (SELECT correlationId FROM {cu.MEMSET})")


def test_memsets_count_as_calls_and_gpu_busy_time(capture, tmp_path):
    """Each H2D copy of gpu25-concurrent turned into a memset of the same GPU interval (its row moved
    to a MEMSET table, its API call renamed cudaMemsetAsync): the calls are memset calls now, the
    copies are gone, and the GPU busy figures are those of the original, as the intervals are."""
    src = capture("gpu25-concurrent")
    path = edited_copy(src, tmp_path / "memsets.sqlite", *TO_MEMSETS)
    moved = sql(path, f"SELECT count(*) FROM {cu.MEMSET}")[0][0]
    calls = sql(path, COUNT_SQL.format("s.value = 'cudaMemsetAsync_v3020'"))[0][0]
    assert moved == calls == sql(src, f"SELECT count(*) FROM {cu.MEMCPY} WHERE copyKind = 1")[0][0] > 0
    before, after = analyze(str(src)).result, analyze(str(path)).result
    assert after.totals.memset_calls == moved and after.totals.h2d_copies == 0
    assert after.totals.memcpy_calls == before.totals.memcpy_calls - moved
    assert after.totals.d2h_copies == before.totals.d2h_copies > 0
    assert after.overlap == before.overlap and after.overlap.gpu_busy_ms_per_request > 0


@pytest.mark.parametrize("col", ["start", "end", "correlationId"])
def test_a_memset_table_without_a_required_column_is_refused(capture, tmp_path, col):
    path = edited_copy(capture("gpu25-concurrent"), tmp_path / "memsets.sqlite", *TO_MEMSETS,
                       f'ALTER TABLE {cu.MEMSET} RENAME COLUMN "{col}" TO "{col}_renamed"')
    with pytest.raises(CaptureError, match=f"{cu.MEMSET} has no column {col}"):
        analyze(str(path))


# --- graph trace mode: recorded in the capture settings, else read off the tables ----------------------

MODE_ROW = "FROM META_DATA_CAPTURE WHERE name LIKE '%CUDA_GRAPH_TRACE_OPTIONS:MODE'"
GRAPH_MODES = [   # (capture, edits, mode): the settings say 'Graph' in both recordings
    ("gpu25-q1c16-pr", [], "graph"),
    ("gpu-q1c16-main", [], "graph"),                                       # no GRAPH_TRACE table: the setting says so
    ("gpu25-q1c16-pr", [f"UPDATE META_DATA_CAPTURE SET value = 'Node' WHERE rowid IN (SELECT rowid {MODE_ROW})"],
     "node"),
    ("gpu25-q1c16-pr", [f"DELETE {MODE_ROW}"], "graph"),                   # graph launches traced whole
    ("gpu-q1c16-main", [f"DELETE {MODE_ROW}"], "unknown"),                 # no graph row, no graph node
    ("gpu-q1c16-main", [f"DELETE {MODE_ROW}", f"UPDATE {cu.KERNEL} SET graphNodeId = 7 WHERE rowid % 10 = 0"],
     "node"),                                                              # kernels that ran as graph nodes
    ("gpu-q1c16-main", [f"DELETE {MODE_ROW}", f"ALTER TABLE {cu.KERNEL} DROP COLUMN graphNodeId"], "unknown"),
]


@pytest.mark.parametrize("name,edits,mode", GRAPH_MODES, ids=[f"{n}-{m}-{len(e)}" for n, e, m in GRAPH_MODES])
def test_graph_trace_mode(capture, tmp_path, name, edits, mode):
    src = capture(name)
    assert sql(src, f"SELECT value {MODE_ROW}") == [("Graph",)]
    path = edited_copy(src, tmp_path / "mode.sqlite", *edits) if edits else src
    with Export.open(path) as cap:
        assert cu.graph_trace_mode(cap) == mode
        assert cu.last_api_end(cap) == sql(path, f'SELECT max("end") FROM {cu.RUNTIME}')[0][0] > 0


# --- cuda_traced: CUDA rows, whatever the capture settings say ----------------------------------------------

FLAG = "FROM META_DATA_CAPTURE WHERE name LIKE '%COLLECT_CUDA_TRACE'"
NO_FLAG = f"DELETE {FLAG}"                           # as nsys 2022.4 writes: no such setting
FLAG_OFF = f"UPDATE META_DATA_CAPTURE SET value = 'false' WHERE rowid IN (SELECT rowid {FLAG})"


@pytest.mark.parametrize("flag", [NO_FLAG, FLAG_OFF], ids=["no setting", "setting off"])
def test_cuda_rows_are_read_whatever_the_settings_say(capture, tmp_path, flag):
    """gpu25-concurrent without the COLLECT_CUDA_TRACE setting, or with it off: the same CUDA
    figures as recorded; without the kernel table, the copies and calls still (as SQL counts them);
    without the GPU tables, the calls."""
    src = capture("gpu25-concurrent")
    want = analyze(str(src)).result.totals
    assert want.kernel_launches > 0
    assert analyze(str(edited_copy(src, tmp_path / "a.sqlite", flag))).result.totals == want
    got = analyze(str(edited_copy(src, tmp_path / "b.sqlite", flag, f"DROP TABLE {cu.KERNEL}"))).result.totals
    h2d = sql(src, f"SELECT count(*), sum(bytes) FROM {cu.MEMCPY} WHERE copyKind = 1")[0]
    assert (got.h2d_copies, got.h2d_bytes) == h2d and got.gpu_kernels == 0
    launches = "s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%'"   # 54 runtime, 192 driver
    assert got.kernel_launches == sql(src, COUNT_SQL.format(launches))[0][0]
    got = analyze(str(edited_copy(src, tmp_path / "c.sqlite", flag, f"DROP TABLE {cu.KERNEL}",
                                  f"DROP TABLE {cu.MEMCPY}"))).result.totals      # API calls only
    assert (got.kernel_launches, got.h2d_copies, got.device_syncs) == (want.kernel_launches, 0, want.device_syncs)


@pytest.mark.parametrize("flag", [NO_FLAG, FLAG_OFF], ids=["no setting", "setting off"])
def test_gpu_rows_without_api_calls_are_refused_whatever_the_settings_say(capture, tmp_path, flag):
    """Kernels and copies without the runtime table, in a capture that does not say CUDA was traced:
    refused (they were ignored, with a warning that the capture had no CUDA rows)."""
    path = edited_copy(capture("gpu25-concurrent"), tmp_path / "noapi.sqlite", flag, f"DROP TABLE {cu.RUNTIME}")
    with pytest.raises(CaptureError, match=f"GPU activity .* but no {cu.RUNTIME} table"):
        analyze(str(path))


# --- NULLs where nsys may leave them: memory kinds unknown, one copy per row ---------------------------------

NULL_KINDS = (f"UPDATE {cu.MEMCPY} SET srcKind = NULL WHERE rowid % 2 = 0",
              f"UPDATE {cu.MEMCPY} SET dstKind = NULL WHERE rowid % 3 = 0",
              f"UPDATE {cu.MEMCPY} SET copyCount = NULL WHERE rowid % 5 = 0")


def test_null_memory_kinds_read_as_unknown_and_null_counts_as_one_copy(capture, tmp_path):
    """gpu25-concurrent with srcKind, dstKind and copyCount NULL in some memcpy rows: the memory
    kind is ENUM_CUDA_MEM_KIND's 'Unknown' (by SQL over the capture's own enum table), neither
    pageable nor pinned; a row of NULL copyCount is one copy (the SQL of the schema notes)."""
    path = edited_copy(capture("gpu25-concurrent"), tmp_path / "nulls.sqlite", *NULL_KINDS)
    unknown = sql(path, "SELECT id FROM ENUM_CUDA_MEM_KIND WHERE name LIKE '%UNKNOWN'")[0][0]
    analysis = analyze(str(path), rows=True)
    t = analysis.rows("transfers")
    want = sql(path, f"SELECT correlationId, COALESCE(srcKind, {unknown}), COALESCE(dstKind, {unknown}), "
                     f"COALESCE(copyCount, 1), bytes, copyKind FROM {cu.MEMCPY} ORDER BY correlationId")
    order = np.argsort(t["corr"], kind="stable")
    got = np.stack([np.asarray(t[c])[order] for c in ("corr", "srcKind", "dstKind", "copies", "bytes", "copyKind")], 1)
    assert got.tolist() == [list(r) for r in want]
    totals = analysis.result.totals
    h2d = sql(path, f"SELECT SUM(COALESCE(copyCount, 1)), SUM(srcKind = 0), SUM(srcKind = 1), "
                    f"SUM(srcKind IS NULL) FROM {cu.MEMCPY} WHERE copyKind = 1")[0]
    assert (totals.h2d_copies, totals.h2d_pageable, totals.h2d_pinned) == h2d[:3] and h2d[3] > 0


# the calls of interest by name (launches, graph launches, copies, sets, syncs), as SQL
OF_INTEREST_SQL = " OR ".join(_IS.format(n) for n in (
    "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel", "cuLaunchGrid",
    "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset"))
OF_INTEREST_SQL += f" OR {DEVICE_SYNC_SQL} OR {STREAM_SYNC_SQL}"


@pytest.mark.parametrize("name", ["gpu25-concurrent", "gpu25-sync-slice"])
def test_calls_table_holds_the_calls_of_interest_only(capture, name):
    """The row-level calls: one per launch, copy, set or sync (SQL over the API names), none of the
    other API calls (cuGetProcAddress, cudaStreamIsCapturing, cuKernelGetName, ...)."""
    path = capture(name)
    calls = analyze(str(path), rows=True).rows("calls")
    want = sql(path, f"SELECT r.correlationId FROM {cu.RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
                     f"WHERE {OF_INTEREST_SQL} ORDER BY r.correlationId")
    others = sql(path, COUNT_SQL.format(f"NOT ({OF_INTEREST_SQL})"))[0][0]
    assert others > 1000 and sorted(np.asarray(calls["corr"]).tolist()) == [r[0] for r in want]


def test_has_pid_says_whether_gpu_rows_name_their_process(capture, tmp_path):
    """GPU rows pair on (process, correlationId) only where some row of the table names its process:
    gpu25-concurrent's do (SQL); with the kernels' globalPid NULL or 0, or dropped, they do not; an
    absent table has none."""
    src = capture("gpu25-concurrent")
    assert sql(src, f"SELECT count(*) FROM {cu.KERNEL} WHERE globalPid >> 24 > 0")[0][0] > 0
    nulled = edited_copy(src, tmp_path / "a.sqlite", f"UPDATE {cu.KERNEL} SET globalPid = NULL WHERE rowid % 2 = 0",
                         f"UPDATE {cu.KERNEL} SET globalPid = 0 WHERE rowid % 2 = 1")
    dropped = edited_copy(src, tmp_path / "b.sqlite", f"ALTER TABLE {cu.KERNEL} DROP COLUMN globalPid")
    for path, kernel in ((src, True), (nulled, False), (dropped, False)):
        with Export.open(path) as cap:
            assert (cu.has_pid(cap, cu.KERNEL), cu.has_pid(cap, cu.MEMCPY), cu.has_pid(cap, cu.MEMSET)) == (
                kernel, True, False)
    kernels = analyze(str(nulled), rows=True).rows("kernels")      # a NULL process reads as none (0)
    assert sorted(np.asarray(kernels["gpid"]).tolist()) == [0] * sql(nulled, f"SELECT count(*) FROM {cu.KERNEL}")[0][0]
