"""Vectorised interval work: containment, union and overlap of [start, end) intervals.

All functions take NumPy int64 arrays (ns) and loop only over thread keys or nesting
levels, never over events.
"""
from __future__ import annotations

import numpy as np


def nesting_depth(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depth of each interval among the intervals of the same key (0 = outermost).

    Counts, for every interval, how many intervals of its key are open at its start
    (started earlier, or at the same time but longer, and not yet ended).
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    # events: +1 at start, -1 at end; ties: ends before starts, and among equal starts
    # the longer interval opens first so that it becomes the parent.
    ev_key = np.concatenate([key, key])
    ev_t = np.concatenate([start, end])
    # at equal times ends come first (0), then starts (1), then ends of empty intervals (2)
    ev_kind = np.concatenate([np.ones(n, np.int8), np.where(end == start, 2, 0).astype(np.int8)])
    ev_len = np.concatenate([-(end - start), np.zeros(n, np.int64)])
    ev_delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    ev_idx = np.concatenate([np.arange(n), np.full(n, -1)])
    order = np.lexsort((ev_len, ev_kind, ev_t, ev_key))
    k = ev_key[order]
    d = np.cumsum(ev_delta[order])
    # reset the running sum at every new key
    first = np.r_[True, k[1:] != k[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(len(k)), 0))
    offset = d[base] - ev_delta[order][base]
    depth_after = d - offset
    is_start = ev_idx[order] >= 0
    out = np.empty(n, dtype=np.int64)
    out[ev_idx[order][is_start]] = depth_after[is_start] - 1
    return out


def innermost_containing(outer_key, outer_start, outer_end, inner_key, inner_start, inner_end) -> np.ndarray:
    """For each inner interval, the index of the innermost outer interval of the same key
    with outer_start <= inner_start and inner_end <= outer_end, or -1.

    Outer intervals of one key must be properly nested (NVTX push/pop ranges are). At each
    nesting level they are disjoint, so one binary search per level finds the candidate.
    """
    outer_key = np.asarray(outer_key)
    res = np.full(len(inner_start), -1, dtype=np.int64)
    if len(outer_start) == 0 or len(inner_start) == 0:
        return res
    depth = nesting_depth(outer_key, outer_start, outer_end)
    keys, okey = np.unique(outer_key, return_inverse=True)
    ikey = np.searchsorted(keys, inner_key)
    ikey_ok = (ikey < len(keys)) & (keys[np.minimum(ikey, len(keys) - 1)] == inner_key)
    for level in range(int(depth.max()), -1, -1):
        sel = np.flatnonzero(depth == level)
        # composite sort: by key then start
        order = sel[np.lexsort((outer_start[sel], okey[sel]))]
        ok_sorted = okey[order]
        st_sorted = outer_start[order]
        todo = np.flatnonzero((res < 0) & ikey_ok)
        if len(todo) == 0:
            break
        # per key block boundaries
        lo = np.searchsorted(ok_sorted, ikey[todo], side="left")
        hi = np.searchsorted(ok_sorted, ikey[todo], side="right")
        # within each block, last start <= inner start: search on (key, start) pairs
        pos = _search_pairs(ok_sorted, st_sorted, ikey[todo], inner_start[todo]) - 1
        valid = (pos >= lo) & (pos < hi)
        cand = np.where(valid, order[np.clip(pos, 0, len(order) - 1)], -1)
        hit = valid & (outer_end[np.maximum(cand, 0)] >= inner_end[todo])
        res[todo[hit]] = cand[hit]
    return res


def _search_pairs(sorted_key, sorted_t, q_key, q_t) -> np.ndarray:
    """searchsorted(side='right') on (key, t) pairs sorted lexicographically."""
    lo = np.searchsorted(sorted_key, q_key, side="left")
    hi = np.searchsorted(sorted_key, q_key, side="right")
    out = lo.copy()
    # keys are few; search each key's block with one vectorised call
    for k in np.unique(q_key):
        m = q_key == k
        a, b = lo[m][0], hi[m][0]
        out[m] = a + np.searchsorted(sorted_t[a:b], q_t[m], side="right")
    return out


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones (touching intervals merge)."""
    if len(start) == 0:
        return start.astype(np.int64), end.astype(np.int64)
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = np.maximum.accumulate(end[order])
    new = np.r_[True, s[1:] > e[:-1]]
    group = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(len(ms), dtype=np.int64)
    np.maximum.at(me, group, e)
    return ms, me


def covered(ms: np.ndarray, me: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a, b) covered by the disjoint sorted intervals (ms, me)."""
    if len(ms) == 0:
        return np.zeros(len(a), dtype=np.int64)
    cum = np.r_[0, np.cumsum(me - ms)]

    def upto(t):
        j = np.searchsorted(ms, t, side="right") - 1
        jj = np.maximum(j, 0)
        part = np.where(j >= 0, np.clip(t - ms[jj], 0, me[jj] - ms[jj]), 0)
        return cum[jj] * (j >= 0) + part

    return np.maximum(upto(b) - upto(a), 0)
