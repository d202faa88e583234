"""The shortcuts the streamed reader takes for speed give what the plain computation gives:
duplicate pairing counted over a window's range instead of by sorting, the call index searched
in the slice a window's ids span. Oracles: Counter and a dict over the same ids."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from clef_prof.analyze.figures.cuda import CallIndex
from clef_prof.analyze.figures.cuda_pass import pair as _pair


@pytest.mark.parametrize("spread", [1, 3, 10_000])       # near together (counted) .. far apart (sorted)
def test_pair_counts_repeats_and_calls_paired_before(spread):
    rng = np.random.default_rng(spread)
    n_calls = 200_000
    paired = rng.random(n_calls) < 0.1
    before = paired.copy()
    call = np.sort(rng.integers(0, 5_000, 3_000)) * spread % n_calls
    call = call[rng.permutation(len(call))]
    seen = Counter(call.tolist())
    want = sum(c - 1 for c in seen.values()) + sum(bool(before[u]) for u in seen)
    assert _pair(paired, call) == want
    assert paired.sum() == (before | np.isin(np.arange(n_calls), list(seen))).sum()
    assert paired[list(seen)].all() and (paired[before]).all()
    assert _pair(paired, call[:0]) == 0


@pytest.mark.parametrize("processes", [1, 3])
def test_call_index_finds_each_window_as_a_dict_does(processes):
    rng = np.random.default_rng(processes)
    idx, table, at = CallIndex(), {}, 0
    for _ in range(20):                                  # chunks of calls, ids rising with gaps
        corr = at + np.cumsum(rng.integers(1, 4, 5_000))
        at = int(corr[-1])
        pk = rng.integers(0, processes, len(corr)) + 7
        for c, p in zip(corr.tolist(), pk.tolist()):
            table.setdefault((p, c), len(table))
        idx.add(corr, pk)
    idx.freeze()
    for lo in (0, at // 3, at - 2_000):                  # windows of ids, some absent, some beyond
        q = rng.integers(lo, lo + 3_000, 4_000)
        qp = rng.integers(0, processes, len(q)) + 7
        got = idx.lookup(q, qp)
        assert got.tolist() == [table.get((p, c), -1) for p, c in zip(qp.tolist(), q.tolist())]
        if processes == 1:
            assert idx.lookup(q).tolist() == [table.get((7, c), -1) for c in q.tolist()]


def _union_length(iv: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is not None and s <= cur_e:
            cur_e = max(cur_e, e)
        else:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
    return total + (cur_e - cur_s if cur_e is not None else 0)


def _covered(iv: list[tuple[int, int]], a: int, b: int) -> int:
    return _union_length([(max(s, a), min(e, b)) for s, e in iv if min(e, b) > max(s, a)])


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("unstaged_from", [None, 0, 3])      # every row staged; some from the start; from window 3
def test_busy_stream_staged_union_shared_until_a_row_is_not_staged(ordered, unstaged_from):
    """BusyStream keeps one union while every row is staged: its figures equal plain loops over
    the same rows, whether or when unstaged rows arrive."""
    from clef_prof.analyze.figures.overlap import BusyStream

    rng = np.random.default_rng(7 if unstaged_from is None else unstaged_from)
    n_batches, pks = 40, np.array([5, 9])
    b_start = np.sort(rng.integers(0, 1_000_000, n_batches))
    b_end = b_start + rng.integers(1_000, 40_000, n_batches)
    b_pk = pks[np.arange(n_batches) % 2]
    busy = BusyStream(b_pk, b_start, b_end, ["K", "M"], ordered=ordered, n_batches=n_batches)
    rows = []                                           # (pk, start, end, staged, batch)
    t = {"K": 0, "M": 0}
    for w in range(8):
        for src in ("K", "M"):
            n = int(rng.integers(50, 300))
            start = t[src] + np.cumsum(rng.integers(0, 8_000, n))
            t[src] = int(start[-1])
            end = start + rng.integers(1, 20_000, n)
            pk = rng.choice(pks, n)
            staged = np.ones(n, bool) if unstaged_from is None or w < unstaged_from else rng.random(n) < 0.6
            batch = np.where(rng.random(n) < 0.8, rng.integers(0, n_batches, n), -1)
            busy.add(src, pk, start, end, staged, batch)
            rows += list(zip(pk.tolist(), start.tolist(), end.tolist(), staged.tolist(), batch.tolist()))
    busy.done("K")
    busy.done("M")
    cov, own_ns, per_batch = busy.finish()
    by_pk = {int(p): [(s, e) for q, s, e, _, _ in rows if q == p] for p in pks}
    assert cov.tolist() == [_covered(by_pk[int(p)], int(a), int(b)) for p, a, b in zip(b_pk, b_start, b_end)]
    assert own_ns == sum(_union_length([(s, e) for q, s, e, st, _ in rows if st and q == p]) for p in pks)
    assert per_batch.tolist() == [_union_length([(s, e) for _, s, e, st, bb in rows if st and bb == b])
                                  for b in range(n_batches)]


def _late_export(tmp_path, late) -> str:
    """A table of 3,000 rows whose column b holds integers (after NULLs) and then `late`."""
    import sqlite3

    path = tmp_path / "late.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, b)")
    vals = [None] * 1_000 + list(range(1_999)) + [late]
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(vals)))
    con.commit()
    con.close()
    return str(path)


@pytest.mark.parametrize("late", ["abc", 2.5, b"\x01", 7, None])
def test_adbc_reads_or_refuses_a_value_past_the_first_record_batch(tmp_path, monkeypatch, late):
    """The ADBC driver types a column from the first record batch (here all NULL): a value of
    another type in a later batch is refused naming the column, as in the first; integers and
    NULLs read as the row reader reads them."""
    import sqlite3

    from clef_prof.analyze.read import export as export_module
    from clef_prof.analyze.read.export import Export
    from clef_prof.base.errors import CaptureError

    monkeypatch.setattr(export_module, "READER", "adbc")
    monkeypatch.setattr(export_module, "BATCH_ROWS", 500)
    path = _late_export(tmp_path, late)
    with Export.open(path) as cap:
        if isinstance(late, (int, type(None))):
            got = cap.read("SELECT a, b FROM t", ["a", "b"], threaded=True)
            want = [0 if v is None else v for (v,) in sqlite3.connect(path).execute("SELECT b FROM t")]
            assert got["b"].tolist() == want and len(got["b"]) == 3_000
        else:
            with pytest.raises(CaptureError, match=r"t holds \S+ values in integer column 'b'"):
                cap.read("SELECT a, b FROM t", ["a", "b"])
