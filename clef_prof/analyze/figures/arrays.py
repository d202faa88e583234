"""NumPy set and order statistics as the analyze path needs them, without numpy.ma.

NumPy 2's `np.unique` (without return_* arguments) and `np.percentile` (through np.unique)
import numpy.ma on first use: 20 ms, a tenth of `clef-prof analyze` on a small capture. These
give the same values, bit for bit (tests/analyze/test_arrays.py holds them against NumPy's).
"""
from __future__ import annotations

import math

import numpy as np


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array: `np.unique(values)`."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def distinct_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`a` of each distinct (a, b) pair, ordered by (a, b): `np.unique(np.stack([a, b]), axis=1)[0]`."""
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    return a[np.concatenate(([True], (a[1:] != a[:-1]) | (b[1:] != b[:-1])))] if len(a) else a


def percentile(values: np.ndarray, q: float) -> float:
    """`float(np.percentile(values, q))` of a non-empty array without NaN: NumPy's default
    'linear' method, its arithmetic step for step (index (n-1)·q/100, then a + (b-a)·t below
    t = 0.5 and b - (b-a)·(1-t) from it)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    v = (n - 1) * (q / 100)
    if v >= n - 1:
        return float(x.max())
    i = math.floor(v)
    t = v - i
    s = np.partition(x, (i, i + 1))        # the two order statistics it needs, without a full sort
    a, b = float(s[i]), float(s[i + 1])
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t
