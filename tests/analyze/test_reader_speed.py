"""The shortcuts the streamed reader takes for speed give what the plain computation gives:
duplicate pairing counted over a window's range instead of by sorting, the call index searched
in the slice a window's ids span. Oracles: Counter and a dict over the same ids."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from clef_prof.analyze.cuda import CallIndex
from clef_prof.analyze.result import _pair


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
