"""E-divisive means (clef_prof.history.edivisive) against the paper's statistic computed by hand,
the published reference behaviour of `ecp::e.divisive` (James & Matteson 2014, JSS 62(7), §5.1:
a change in variance and in mean found at alpha = 1, only the mean's at alpha = 2), and its
level under no change (the permutation test is exact for exchangeable data)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from clef_prof.history import edivisive as ed


def q_by_hand(x, y, alpha=1.0) -> float:
    """Matteson & James (2014) eq. (5)-(6): Q = nm/(n+m) * E, E from the three mean distances."""
    n, m = len(x), len(y)
    between = sum(abs(a - b) ** alpha for a in x for b in y) * 2 / (n * m)
    wx = sum(abs(a - b) ** alpha for a, b in itertools.combinations(x, 2)) / math.comb(n, 2) if n > 1 else 0.0
    wy = sum(abs(a - b) ** alpha for a, b in itertools.combinations(y, 2)) / math.comb(m, 2) if m > 1 else 0.0
    return n * m / (n + m) * (between - wx - wy)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5])
def test_best_split_is_the_papers_statistic_maximised(alpha):
    rng = np.random.default_rng(3)
    z = np.r_[rng.normal(0, 1, 9), rng.normal(1.5, 1, 8)]
    best = max(((q_by_hand(z[:t], z[t:k], alpha), t, k) for t in range(2, len(z) - 1)
                for k in range(t + 2, len(z) + 1)))
    tau, kappa, q = ed.best_split(z, alpha=alpha, min_size=2)
    assert (tau, kappa) == (best[1], best[2])
    assert q == pytest.approx(best[0], rel=1e-12)


def test_every_split_of_the_grid_matches_by_hand():
    z = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0])
    q = ed._q(ed._prefix(ed._distances(z, 1.0)), 1)
    for t in range(1, len(z)):
        for k in range(t + 1, len(z) + 1):
            assert q[t, k] == pytest.approx(q_by_hand(z[:t], z[t:k]), abs=1e-12), (t, k)
    assert np.isneginf(q[0]).all() and np.isneginf(q[3, 3])


def _jss_series(seed):
    """The design of the ecp paper's univariate example: 4 periods of 100 points, N(0, 1),
    N(0, 3^2), N(2, 1), N(2, 4^2)."""
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(0, 1, 100), rng.normal(0, 3, 100), rng.normal(2, 1, 100), rng.normal(2, 4, 100)]


def test_the_ecp_example_alpha_1_finds_the_variance_and_mean_changes():
    hits = 0
    for seed in range(4):
        found = [s.index for s in ed.e_divisive(_jss_series(seed), 0.05, 199, min_size=30, alpha=1.0, seed=seed)]
        hits += all(any(abs(f - t) <= 10 for f in found) for t in (100, 200, 300)) and len(found) <= 4
    assert hits >= 3, hits


def test_the_ecp_example_alpha_2_sees_only_the_change_in_mean():
    """At alpha = 2 the energy distance is the squared difference of the means: the changes in
    variance at 100 and 300 are invisible, the change of mean at 200 is found."""
    for seed in range(3):
        found = [s.index for s in ed.e_divisive(_jss_series(seed), 0.05, 199, min_size=30, alpha=2.0, seed=seed)]
        assert any(abs(f - 200) <= 10 for f in found), found
        assert not any(abs(f - 100) <= 5 for f in found) or not any(abs(f - 300) <= 5 for f in found), found


def test_level_under_no_change_is_the_significance_level():
    """400 series of 30 points without change: the share with a change point is the level (5%),
    within 3 binomial standard deviations, and under any noise (the test is exact)."""
    studies, level = 400, 0.05
    tol = 3 * math.sqrt(level * (1 - level) / studies)
    rng = np.random.default_rng(11)
    for draw in (lambda: rng.normal(size=30), lambda: rng.standard_t(2, 30), lambda: rng.exponential(size=30)):
        rate = np.mean([bool(ed.e_divisive(draw(), level, 199, seed=i)) for i in range(studies)])
        assert abs(rate - level) <= tol, rate


def test_seeded_and_deterministic():
    z = np.r_[np.zeros(12), np.ones(12)] + np.random.default_rng(0).normal(0, 0.1, 24)
    a = ed.e_divisive(z, seed=5)
    assert a == ed.e_divisive(z, seed=5) and [s.index for s in a] == [12]
    assert a[0].p == pytest.approx(1 / 200)


def test_constant_short_and_bad_series():
    assert ed.e_divisive(np.full(30, 2.5)) == []
    assert ed.e_divisive([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError):
        ed.e_divisive([1.0, np.nan, 2.0, 3.0])
    with pytest.raises(ValueError):
        ed.e_divisive(np.ones(10), alpha=2.5)
