"""The within-capture bootstrap's sums when a capture has more batches than one chunk holds, and at
the smallest captures, and of several arms on threads: against the same seeded draws counted by
hand, replicate by replicate."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.read import export
from clef_prof.compare import resample
from clef_prof.compare.resample import arm_rngs, ratio, resampled_sums, resampled_sums_of_arms


def by_hand(rng, blocks, n_boot):
    """Each replicate: every capture's batches drawn with replacement (the generator's stream in order,
    capture after capture), each batch's values summed as often as it was drawn."""
    sums = np.zeros((n_boot, blocks[0].shape[1]))
    for x in blocks:
        if len(x) == 0:
            continue
        draws = rng.integers(0, len(x), size=(n_boot, len(x)))
        for r in range(n_boot):
            sums[r] += x[draws[r]].sum(axis=0)
    return sums


@pytest.mark.parametrize("cells", [resample._CHUNK_CELLS, 1000, 1])
@pytest.mark.parametrize("sizes", [(2500, 30), (0, 1, 7), (4001,), (1,)])
def test_sums_are_the_drawn_batches_whatever_the_chunks(sizes, cells):
    """2,500 and 4,001 batches at 2,000 replicates: more cells than one chunk (4 million) holds, so
    the draws are made in several chunks (and in many more, or one replicate at a time, with fewer
    cells); an empty capture draws nothing; one batch is always itself."""
    gen = np.random.default_rng(5)
    blocks = [gen.integers(0, 10_000, size=(n, 3)).astype(np.float64) for n in sizes]
    n_boot = 2000
    got = resampled_sums(np.random.default_rng(11), blocks, n_boot, cells)
    assert got.shape == (n_boot, 3)
    assert np.array_equal(got, by_hand(np.random.default_rng(11), blocks, n_boot))
    if sizes == (1,):
        assert (got == blocks[0][0]).all()


@pytest.mark.parametrize("cpus", [1, 2, 8, 32])
@pytest.mark.parametrize("n_boot", [1500, 5, 1])
def test_parts_on_threads_are_the_parts_one_after_the_other(monkeypatch, cpus, n_boot):
    """Each arm's replicates in 8 parts, each part from its own stream, whatever the threads and
    the share of the chunk each gets: the same sums on 1 CPU as on 32."""
    monkeypatch.setattr(export, "usable_cpus", lambda: cpus)
    gen = np.random.default_rng(6)
    arms = [[gen.integers(0, 1000, size=(n, 2)).astype(np.float64) for n in sizes]
            for sizes in [(3000, 40), (7,), (0, 1200)]]
    got = resampled_sums_of_arms(arm_rngs(4, 3), arms, n_boot)
    sizes = [n_boot // 8 + (i < n_boot % 8) for i in range(8)]
    assert sum(sizes) == n_boot and resample.parts(n_boot) == sizes
    want = [np.concatenate([by_hand(rng, blocks, k) for rng, k in zip(streams, sizes)])
            for streams, blocks in zip(arm_rngs(4, 3), arms)]
    assert len(got) == 3 and all(g.shape == (n_boot, 2) and np.array_equal(g, w) for g, w in zip(got, want))


def test_streams_are_the_seed_s_and_differ_by_arm_and_part():
    a, b = arm_rngs(0, 2), arm_rngs(0, 2)
    assert len(a) == 2 and len(a[0]) == 8
    firsts = [[g.integers(0, 2**62) for g in arm] for arm in a]
    assert firsts == [[g.integers(0, 2**62) for g in arm] for arm in b]
    assert len({x for arm in firsts for x in arm}) == 16


def test_ratio_of_sums_with_its_scale():
    sums = np.array([[10.0, 4.0], [3.0, 0.0]])
    out = ratio(sums, 0, 1, 1e-6)
    assert out[0] == pytest.approx(2.5e-6) and np.isinf(out[1])
    assert ratio(sums, 0, 1)[0] == 2.5
