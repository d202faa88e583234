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
    return Containment(outer_key, outer_start, outer_end).find(inner_key, inner_start, inner_end)


class Containment:
    """`innermost_containing` with the outer side prepared once, so that inner intervals can
    be placed chunk by chunk (a stream of API calls) without re-sorting the outer ranges.

    Per key (thread) and nesting level, the outer intervals are disjoint and sorted by start:
    one binary search per level, innermost level first, finds the candidate.
    """

    def __init__(self, outer_key, outer_start, outer_end):
        self.outer_key = np.asarray(outer_key)
        self.outer_start = np.asarray(outer_start)
        self.outer_end = np.asarray(outer_end)
        # per key: [(order, sorted starts) for each level, innermost first]
        self.blocks: list[list[tuple[np.ndarray, np.ndarray]]] = []
        if len(self.outer_start) == 0:
            self.keys = np.zeros(0, dtype=np.int64)
            return
        depth = nesting_depth(self.outer_key, self.outer_start, self.outer_end)
        self.keys, okey = np.unique(self.outer_key, return_inverse=True)
        self.blocks = [[] for _ in range(len(self.keys))]
        # one sort, innermost level first, then key, then start (ties in input order): each level
        # is a run of it (a sort per level would cost depth x ranges when ranges nest deep)
        by_level = np.lexsort((self.outer_start, okey, -depth))
        cuts = np.flatnonzero(np.diff(depth[by_level])) + 1
        for order in np.split(by_level, cuts):
            ok_sorted = okey[order]
            bounds = np.searchsorted(ok_sorted, np.arange(len(self.keys) + 1), side="left")
            for k in range(len(self.keys)):
                a, b = bounds[k], bounds[k + 1]
                if b > a:
                    self.blocks[k].append((order[a:b], self.outer_start[order[a:b]]))

    def find(self, inner_key, inner_start, inner_end) -> np.ndarray:
        inner_key = np.asarray(inner_key)
        inner_start = np.asarray(inner_start)
        inner_end = np.asarray(inner_end)
        n = len(inner_start)
        res = np.full(n, -1, dtype=np.int64)
        if not self.blocks or n == 0:
            return res
        keys = self.keys
        ikey = np.searchsorted(keys, inner_key)
        np.minimum(ikey, len(keys) - 1, out=ikey)
        ikey_ok = keys[ikey] == inner_key
        present = np.flatnonzero(np.bincount(ikey[ikey_ok], minlength=len(keys)))
        for k in present:
            if len(present) == 1 and ikey_ok.all():
                idx = None                      # every inner interval is on this key
                qs, qe = inner_start, inner_end
            else:
                idx = np.flatnonzero(ikey_ok & (ikey == k))
                qs, qe = inner_start[idx], inner_end[idx]
            r = np.full(len(qs), -1, dtype=np.int64)
            todo = None                         # None: all of them
            for order, starts in self.blocks[k]:
                ts = qs if todo is None else qs[todo]
                if len(ts) == 0:
                    break
                # last outer start <= inner start at this level, then: does it hold the end?
                pos = np.searchsorted(starts, ts, side="right") - 1
                valid = pos >= 0
                cand = order[np.maximum(pos, 0)]
                te = qe if todo is None else qe[todo]
                hit = valid & (self.outer_end[cand] >= te)
                if todo is None:
                    r[hit] = cand[hit]
                    todo = np.flatnonzero(~hit)
                else:
                    r[todo[hit]] = cand[hit]
                    todo = todo[~hit]
            if idx is None:
                res = r
            else:
                res[idx] = r
        return res


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones (touching intervals merge)."""
    if len(start) == 0:
        return start.astype(np.int64), end.astype(np.int64)
    if len(start) > 1 and (start[1:] >= start[:-1]).all():     # GPU rows come sorted by start
        s, e = start, np.maximum.accumulate(end)
    else:
        order = np.argsort(start, kind="stable")
        s = start[order]
        e = np.maximum.accumulate(end[order])
    new = np.r_[True, s[1:] > e[:-1]]
    # e is a running maximum, so a group's end is its last element's
    last = np.r_[new[1:], True]
    return s[new].astype(np.int64, copy=False), e[last].astype(np.int64, copy=False)


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
