"""GPU busy time: the union of kernel, memcpy, memset and graph intervals per process, and
how much of each host span it covers."""
from __future__ import annotations

import numpy as np

from .intervals import covered, union


def busy_union(pk: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Disjoint busy intervals per process key."""
    out = {}
    for k in np.unique(pk):
        m = pk == k
        out[int(k)] = union(start[m], end[m])
    return out


def covered_by(busy: dict[int, tuple[np.ndarray, np.ndarray]], pk: np.ndarray,
               a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each host span [a, b) of process pk, the ns during which that process's GPU work ran."""
    out = np.zeros(len(a), dtype=np.int64)
    for k in np.unique(pk):
        if int(k) in busy:
            m = pk == k
            ms, me = busy[int(k)]
            out[m] = covered(ms, me, a[m], b[m])
    return out


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals."""
    ms, me = union(start, end)
    return int((me - ms).sum())
