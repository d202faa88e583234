"""GPU busy time at its edges, against loops and by-hand figures: the union of batch spans per process
with no span, one process or several; the per-batch union when one batch's work ends at the latest
time held and the next batch's starts at the earliest (the packed sort key's batch boundary), and
at times near 2**62 ns (the packed key must not overflow)."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.figures.overlap import BatchUnion, span_union
from conftest import loop_union


def arr(*v):
    return np.array(v, dtype=np.int64)


def test_span_union_of_nothing():
    k, s, e = span_union(arr(), arr(), arr())
    assert (k.tolist(), s.tolist(), e.tolist()) == ([], [], []) and k.dtype == s.dtype == e.dtype == np.int64


@pytest.mark.parametrize("seed", range(6))
def test_span_union_per_process_against_the_loop(seed):
    rng = np.random.default_rng(300 + seed)
    n = 30
    key = rng.choice([11, 3, 7], n)
    s = rng.integers(0, 100, n)
    e = s + rng.choice([0, 1, 4, 15], n)
    k, us, ue = span_union(key, s, e)
    want = [(kk, a, b) for kk in sorted(set(key.tolist()))
            for a, b in loop_union(s[key == kk].tolist(), e[key == kk].tolist())]
    assert list(zip(k.tolist(), us.tolist(), ue.tolist())) == want


def merged(batches: int, b, s, e) -> list[int]:
    u = BatchUnion(batches)
    u.add(arr(*b), arr(*s), arr(*e))
    u.merge(float("inf"))
    assert u.size == 0
    return u.ns.tolist()


def test_batch_union_at_the_packed_keys_batch_boundary():
    """Batch 0's work ends at the latest time held (100), batch 1's starts at the earliest (0) and
    lasts no time: batch 1 is busy 0 ns, whatever batch 0 reached."""
    assert merged(2, [0, 1], [50, 0], [100, 0]) == [50, 0]
    assert merged(2, [1, 0, 0], [0, 50, 60], [1, 100, 70]) == [50, 1]


def test_batch_union_near_2_to_62_ns():
    """Two intervals of one batch on either side of 2**62 ns: 5 + 10 ns busy."""
    t = 1 << 62
    assert merged(1, [0, 0], [t - 10, t + 10], [t - 5, t + 20]) == [15]
    assert merged(3, [2, 2, 0], [t - 10, t + 10, t - 3], [t - 5, t + 20, t + 30]) == [33, 0, 15]


def stream(chunks, sources=("k",), batches=((1, 0, 100),)):
    """A BusyStream over batch spans (pk, start, end), fed chunks (source, start, end, staged[, pk]),
    each source marked done at the end: (busy ns within each span, busy ns of the staged work)."""
    from clef_prof.analyze.figures.overlap import BusyStream

    pk, bs, be = (arr(*c) for c in zip(*batches))
    busy = BusyStream(pk, bs, be, list(sources))
    for src, s, e, st, *rows_pk in chunks:
        busy.add(src, arr(*rows_pk[0]) if rows_pk else np.ones(len(s), np.int64), arr(*s), arr(*e),
                 np.array(st, dtype=bool))
    for src in sources:
        busy.done(src)
    cov, own, _ = busy.finish()
    return cov.tolist(), own


def test_out_of_order_rows_are_refused_in_ordered_mode():
    """Each chunk of a table in start order, but the second starts before the first one's last
    start; or two rows of one chunk out of order: `Unordered` (the caller starts over unordered)."""
    from clef_prof.analyze.figures.overlap import Unordered

    with pytest.raises(Unordered):
        stream([("k", [10, 30], [20, 40], [1, 1]), ("k", [25], [35], [1])])
    with pytest.raises(Unordered):
        stream([("k", [30, 10], [40, 20], [1, 1])])


def test_rows_in_start_order_with_equal_starts_stream():
    """Equal starts within a chunk and across chunks are in order: no fallback, and the figures."""
    assert stream([("k", [10, 10, 30], [20, 15, 40], [1, 1, 1]), ("k", [30, 50], [45, 60], [1, 1])]) == \
        ([10 + 15 + 10], 35)


def test_staged_busy_time_with_unstaged_rows_in_two_chunks():
    """Two chunks, each with an unstaged row (work launched outside every stage), from one of two
    tables (the other has no row yet, so nothing is final until the end): the staged busy time
    counts only the staged rows; the span coverage counts all."""
    assert stream([("k", [0, 20], [10, 30], [0, 1]), ("k", [40, 60], [50, 70], [0, 1])], sources=("k", "m")) == \
        ([40], 20)


def test_rows_of_several_processes_in_one_chunk():
    """Process 1 has batch spans [0, 100) and [200, 300), process 2 one [0, 50); process 3 has GPU
    rows and no batch span: its busy time counts as staged work and covers no span."""
    got = stream([("k", [10, 20, 30, 210, 220], [40, 60, 35, 250, 230], [1, 1, 1, 1, 1], [1, 2, 3, 1, 2])],
                 batches=((1, 0, 100), (1, 200, 300), (2, 0, 50)))
    # process 1: [10, 40) and [210, 250); process 2: [20, 60) clipped to its span, and [220, 230) outside it
    assert got == ([30, 40, 30], 30 + 40 + 40 + 10 + 5)


def test_batch_union_of_late_batches_over_a_long_span():
    """Work of batches 2**20 and 2**20 + 1 (a capture of a million batches) held over about 2**42 ns
    (73 minutes: an unordered table held to the end): the packed (batch, time) key of two batches
    fits in int64; one built from the batch numbers themselves (2**21 times the span) would cross
    2**63 inside batch 2**20's times."""
    n, t = 1 << 20, 4_398_045_462_527          # the held times span t + 1 = 2**63 / (2**21 + 0.5) ns
    u = BatchUnion(n + 2)
    u.add(arr(n, n, n + 1, n + 1), arr(0, t - 10, 5, 7), arr(10, t, t - 1, 9))
    u.merge(float("inf"))
    assert u.ns[n:].tolist() == [20, t - 6] and int(u.ns[:n].sum()) == 0
