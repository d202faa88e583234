"""The interval functions at their edges, against loops written from their docstrings: no interval,
one interval, zero-length intervals, equal starts and ends, touching intervals, keys that hold no
outer interval (below, between and above the others), and input in and out of start order."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.figures.intervals import covered, innermost_containing, nesting_depth, union
from conftest import loop_union


def loop_depth(key, start, end) -> list[int]:
    """How many intervals of the same key are open at each one's start: those that open before it
    (an earlier start; at the same start a longer one, or an equal one listed earlier) and have not
    ended (an end at that very time closes first, except the end of a zero-length interval, which
    comes after the starts of its time)."""
    n, out = len(start), []
    for i in range(n):
        d = 0
        for j in range(n):
            if j == i or key[j] != key[i]:
                continue
            before = (start[j], -(end[j] - start[j]), j) < (start[i], -(end[i] - start[i]), i)
            still_open = end[j] > start[i] or (end[j] == start[j] == start[i])
            d += before and still_open
        out.append(d)
    return out


def loop_holders(okey, os_, oe, ikey, is_, ie) -> list[list[int]]:
    """For each inner interval, the outer intervals of its key that hold it."""
    return [[j for j in range(len(os_)) if okey[j] == k and os_[j] <= s and e <= oe[j]] for k, s, e in zip(ikey, is_, ie)]


def loop_covered(parts, a, b) -> int:
    return sum(max(0, min(y, b) - max(x, a)) for x, y in parts)


def arr(*v):
    return np.array(v, dtype=np.int64)


def test_no_interval_and_one():
    z = arr()
    assert nesting_depth(z, z, z).tolist() == [] and nesting_depth(z, z, z).dtype == np.int64
    assert nesting_depth(arr(7), arr(5), arr(9)).tolist() == [0]
    assert innermost_containing(z, z, z, arr(1), arr(2), arr(3)).tolist() == [-1]
    assert innermost_containing(arr(7), arr(5), arr(9), z, z, z).tolist() == []
    assert innermost_containing(arr(7), arr(5), arr(9), arr(7), arr(6), arr(7)).tolist() == [0]
    # one outer interval; inner ones on its key (inside, at both edges, across an edge) and on others
    got = innermost_containing(arr(7), arr(5), arr(9), arr(7, 7, 7, 7, 7, 6, 8), arr(5, 6, 9, 4, 8, 6, 6),
                               arr(9, 6, 9, 6, 10, 7, 7))
    assert got.tolist() == [0, 0, 0, -1, -1, -1, -1]
    ms, me = union(z, z)
    assert (ms.tolist(), me.tolist(), ms.dtype, me.dtype) == ([], [], np.int64, np.int64)
    assert [x.tolist() for x in union(arr(4), arr(6))] == [[4], [6]]
    assert covered(z, z, arr(0, 5), arr(10, 5)).tolist() == [0, 0]


def test_zero_length_and_equal_intervals():
    # [0,10) holds two equal [2,5) (the first listed holds the second) and [5,8), which holds the
    # empty [5,5) (ends at 5 close first, the longer start opens first); on key 2 two empty
    # intervals at 3 inside [3,4), the first empty one holding the second
    key = arr(1, 1, 1, 1, 1, 2, 2, 2)
    s = arr(0, 2, 2, 5, 5, 3, 3, 3)
    e = arr(10, 5, 5, 5, 8, 3, 3, 4)
    assert nesting_depth(key, s, e).tolist() == loop_depth(key.tolist(), s.tolist(), e.tolist()) == \
        [0, 1, 2, 2, 1, 1, 2, 0]


@pytest.mark.parametrize("seed", range(12))
def test_nesting_depth_against_the_loop(seed):
    """Small times, so that starts, ends and empty intervals tie often; nested or not."""
    rng = np.random.default_rng(seed)
    n = 40
    key = rng.choice([3, 5, 9], n)
    s = rng.integers(0, 12, n)
    e = s + rng.choice([0, 0, 1, 2, 5, 9], n)
    assert nesting_depth(key, s, e).tolist() == loop_depth(key.tolist(), s.tolist(), e.tolist())


@pytest.mark.parametrize("seed", range(12))
def test_innermost_containing_against_the_loop(seed):
    """Outer intervals properly nested per key (disjoint siblings, touching ones, equal children),
    inner ones of every key, including keys with no outer interval below, between and above the
    outer keys, and zero-length inner intervals."""
    rng = np.random.default_rng(100 + seed)
    okey, os_, oe = [], [], []

    def nest(k, lo, hi, depth):
        okey.append(k), os_.append(lo), oe.append(hi)
        if depth and hi - lo >= 2:
            cuts = np.unique(np.r_[lo, hi, rng.integers(lo, hi, rng.integers(1, 4))])
            for x, y in zip(cuts[:-1], cuts[1:]):
                if rng.random() < 0.7:
                    nest(k, int(x), int(y), depth - 1)

    for k in (4, 8):
        t = int(rng.integers(0, 5))
        for _ in range(4):
            w = int(rng.integers(2, 40))
            nest(k, t, t + w, 3)
            t += w + int(rng.integers(0, 3))
    okey, os_, oe = map(np.array, (okey, os_, oe))
    m = 200
    ikey = rng.choice([2, 4, 6, 8, 10], m)
    is_ = rng.choice(np.r_[os_, oe, rng.integers(0, 200, 20)], m)
    ie = is_ + rng.choice([0, 0, 1, 3, 20], m)
    got = innermost_containing(okey, os_, oe, ikey, is_, ie).tolist()
    holders = loop_holders(okey.tolist(), os_.tolist(), oe.tolist(), ikey.tolist(), is_.tolist(), ie.tolist())
    assert sum(g < 0 for g in got) == sum(not h for h in holders) > 0
    for g, h in zip(got, holders):
        # the innermost: no other holder lies within it (an equal span, a range and its equal
        # child, is either; an empty interval on the edge two siblings share is held by both)
        assert (g < 0) == (not h)
        if g >= 0:
            assert g in h and not any(os_[g] <= os_[j] and oe[j] <= oe[g] and (os_[j], oe[j]) != (os_[g], oe[g])
                                      for j in h)


@pytest.mark.parametrize("seed", range(12))
def test_union_and_covered_against_the_loop(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(2, 30))
    s = rng.integers(0, 60, n)
    e = s + rng.choice([0, 1, 2, 7, 20], n)
    want = loop_union(s.tolist(), e.tolist())
    for order in (np.argsort(s, kind="stable"), rng.permutation(n)):      # start order (streamed), any order
        ms, me = union(s[order], e[order])
        assert list(map(list, zip(ms.tolist(), me.tolist()))) == want
    a = rng.integers(-5, 90, 25)
    b = a + rng.choice([0, 1, 5, 30, 100], 25)
    assert covered(ms, me, a, b).tolist() == [loop_covered(want, x, y) for x, y in zip(a.tolist(), b.tolist())]


def test_union_of_touching_and_equal_starts():
    assert [x.tolist() for x in union(arr(0, 5, 5, 12), arr(5, 8, 6, 12))] == [[0, 12], [8, 12]]
    assert [x.tolist() for x in union(arr(3, 3), arr(4, 9))] == [[3], [9]]
    assert [x.tolist() for x in union(arr(9, 3), arr(10, 4))] == [[3, 9], [4, 10]]


@pytest.mark.parametrize("keys", [(4,), (4, 8)], ids=["one-key", "two-keys"])
def test_innermost_containing_when_every_inner_key_has_outer_intervals(keys):
    """Inner intervals only on keys that hold outer ones (one key, or both of two): the outer
    sets of the keys differ, so placing one key's intervals among the other's gives other answers."""
    okey = arr(4, 4, 4, 8, 8)
    os_, oe = arr(0, 10, 12, 5, 30), arr(20, 15, 14, 40, 35)
    ikey = np.array([keys[i % len(keys)] for i in range(8)], dtype=np.int64)
    is_ = arr(1, 11, 13, 6, 31, 16, 12, 36)
    ie = arr(2, 12, 14, 7, 33, 19, 13, 39)
    got = innermost_containing(okey, os_, oe, ikey, is_, ie).tolist()
    holders = loop_holders(okey.tolist(), os_.tolist(), oe.tolist(), ikey.tolist(), is_.tolist(), ie.tolist())
    want = [min(h, key=lambda j: oe[j] - os_[j]) if h else -1 for h in holders]
    assert got == want
    assert want == ([0, 1, 2, 0, -1, 0, 2, -1] if len(keys) == 1 else [0, 3, 2, 3, -1, 3, 2, 3])
