"""GPU overlap against a brute-force computation on a slice of a real GPU capture."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from clef_prof.base import cupti
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.intervals import covered, innermost_containing, nesting_depth, union
from clef_prof.capture.slicing import slice_capture


@pytest.fixture(scope="module")
def main_slice(capture, tmp_path_factory):
    out = tmp_path_factory.mktemp("slice") / "main-slice.sqlite"
    slice_capture(str(capture("gpu-q1c16-main")), str(out), 400_000_000, 700_000_000)
    return out


def brute_force(path) -> tuple[int, int, list[float]]:
    """Plain loops: for each batch, walk every GPU interval of its process and add the time
    it covers of the batch span, after merging overlapping GPU intervals by hand."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    batches = con.execute(
        "SELECT start, [end], globalTid >> 24 FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'pooler %'").fetchall()
    gpu = con.execute(
        "SELECT start, [end], globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
        "SELECT start, [end], globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall()
    merged: dict[int, list[list[int]]] = {}
    for s, e, p in sorted(gpu):
        lst = merged.setdefault(p, [])
        if lst and s <= lst[-1][1]:
            lst[-1][1] = max(lst[-1][1], e)
        else:
            lst.append([s, e])
    busy = span = 0
    fractions = []
    for bs, be, p in batches:
        c = sum(max(0, min(be, e) - max(bs, s)) for s, e in merged.get(p, []))
        busy += c
        span += be - bs
        fractions.append(c / (be - bs))
    return busy, span, fractions


def test_overlap_equals_brute_force(main_slice):
    r = analyze(str(main_slice)).result
    busy, span, fractions = brute_force(main_slice)
    assert r.batches == len(fractions) > 40
    assert r.overlap.gpu_busy_fraction_of_pooler_span == pytest.approx(busy / span, rel=1e-12)
    assert r.overlap.gpu_busy_fraction_p50 == pytest.approx(float(np.percentile(fractions, 50)), rel=1e-12)
    assert 0 < busy / span < 1


def test_slice_keeps_per_request_counts(main_slice):
    r = analyze(str(main_slice)).result
    assert r.per_request.h2d_copies == 9.0
    assert r.per_request.kernel_launches == 15.0
    assert r.warnings == cupti.check("2023.4.4.54", 13000)     # nsys 2023.4 on a CUDA 13 driver, nothing else


def test_union_and_covered_on_crafted_intervals():
    ms, me = union(np.array([5, 0, 2, 20]), np.array([8, 3, 6, 25]))
    assert ms.tolist() == [0, 20] and me.tolist() == [8, 25]
    assert covered(ms, me, np.array([-5, 4, 9, 0]), np.array([1, 22, 19, 30])).tolist() == [1, 6, 0, 13]


def test_innermost_containing_nested_and_per_thread():
    # thread 1: outer [0,100) holding [10,20) and [30,60) holding [40,50); thread 2: [0,100)
    key = np.array([1, 1, 1, 1, 2])
    s = np.array([0, 10, 30, 40, 0])
    e = np.array([100, 20, 60, 50, 100])
    assert nesting_depth(key, s, e).tolist() == [0, 1, 1, 2, 0]
    q_key = np.array([1, 1, 1, 1, 2, 3])
    q_s = np.array([12, 41, 55, 70, 5, 5])
    q_e = np.array([13, 42, 65, 71, 6, 6])
    assert innermost_containing(key, s, e, q_key, q_s, q_e).tolist() == [1, 3, 0, 0, 4, -1]
