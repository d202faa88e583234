"""clef_prof.analyze.figures.arrays gives NumPy's values bit for bit (it exists only to skip numpy.ma)."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.figures.arrays import distinct_pairs, percentile, unique


def _samples():
    rng = np.random.default_rng(16)
    yield np.array([3.0])
    yield np.array([2.0, 1.0])
    yield np.array([5.0, 5.0, 5.0])
    yield np.array([0.0, 1e-300, 1e300, -7.5])
    for n in (3, 4, 7, 100, 101, 1000, 1237):
        yield rng.exponential(1.3, n)                                  # durations in ms
        yield rng.integers(0, 10, n).astype(np.float64)                # many ties
        yield 100.0 * rng.integers(1, 10**6, n) / rng.integers(10**6, 2 * 10**6, n)   # % of a span


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 99, 99.9, 100])
def test_percentile_equals_numpy_bit_for_bit(q):
    for values in _samples():
        want = float(np.percentile(values, q))
        got = percentile(values, q)
        assert got == want and np.signbit(got) == np.signbit(want), (len(values), q, got, want)


def test_percentile_of_integers_as_numpy():
    values = np.array([10**12 + 3, 10**12, 7, 10**12 + 1], dtype=np.int64)
    assert [percentile(values, q) for q in (50, 99)] == [float(np.percentile(values, q)) for q in (50, 99)]


def test_unique_and_distinct_pairs_equal_numpy():
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 50, 5000):
        a = rng.integers(0, 6, n)
        b = rng.integers(1 << 40, (1 << 40) + 4, n)
        assert np.array_equal(unique(b), np.unique(b)) and unique(b).dtype == np.unique(b).dtype
        want = np.unique(np.stack([a, b]), axis=1)[0] if n else a
        assert np.array_equal(distinct_pairs(a, b), want)
    names = np.array(["b", "a", "b", "c"], dtype=object)
    assert list(unique(names)) == ["a", "b", "c"]
