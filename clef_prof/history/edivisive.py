"""E-divisive means: the change points of a series by the energy statistic (Matteson & James 2014).

D. S. Matteson and N. A. James, *A nonparametric approach for multiple change point analysis
of multivariate data*, JASA 109(505), 2014 (the R package `ecp`, `e.divisive`); the method
MongoDB's and Apache Otava's (formerly Hunter's) change detection is built on.

For a segment Z and a split of it into X = Z[:tau] (n points) and Y = Z[tau:kappa] (m points),
the scaled sample energy distance is

    Q(tau, kappa) = n m / (n + m) * ( 2/(n m) sum |X_i - Y_j|^a
                                      - sum_{i<k} |X_i - X_k|^a / C(n, 2)
                                      - sum_{j<k} |Y_j - Y_k|^a / C(m, 2) ),   0 < a <= 2.

The best split of each segment maximises Q over tau and kappa; the best over all segments is a
candidate change point (at tau: the first point of the new segment). It is kept when a
permutation test finds it significant: the points of every current segment are permuted within
it R times, the best Q over all segments recomputed each time, and p = (1 + #{Q_perm >= Q}) /
(R + 1). Splitting stops at the first candidate with p above the significance level. The
permutation test is exact for exchangeable data: under a series without change, the first split
is accepted with probability at most the level, whatever the noise's distribution.

Everything is vectorised: Q for all (tau, kappa) of a segment from the 2-D prefix sums of its
distance matrix, for a batch of permutations at once. Seeded: one seed gives the same change
points on any machine.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

ALPHA = 1.0           # the exponent a of the distance (e.divisive's default; in (0, 2) any change of
                      # distribution is seen, at 2 only a change of mean, as ecp allows)
SIG_LEVEL = 0.05      # e.divisive's default significance level
PERMUTATIONS = 199    # e.divisive's default R
MIN_SIZE = 2          # the fewest points a segment may have (e.divisive allows no fewer)
_CHUNK = 1 << 21      # elements of a (permutations, L + 1, L + 1) block computed at once


@dataclass(frozen=True)
class Split:
    """One accepted change point: `index` is the first point of the new segment; `q` the energy
    statistic of the split; `p` its permutation p-value; `order` the step that found it (1 first)."""

    index: int
    q: float
    p: float
    order: int


def _prefix(d: np.ndarray) -> np.ndarray:
    """S[..., a, b] = sum of d[..., i, j] over i < a, j < b (a zero row and column first)."""
    s = np.zeros(d.shape[:-2] + (d.shape[-2] + 1, d.shape[-1] + 1))
    np.cumsum(np.cumsum(d, axis=-2), axis=-1, out=s[..., 1:, 1:])
    return s


@functools.lru_cache(maxsize=64)
def _weights(length: int, min_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(w_s, w_tt, w_kk, mask) over the (tau, kappa) grid 0..L x 0..L of a segment of `length`
    points, such that Q = w_s S[tau, kappa] - w_tt S[tau, tau] - w_kk S[kappa, kappa] + mask
    (mask: 0 where X and Y both hold at least `min_size` points, -inf elsewhere).

    With n = tau, m = kappa - tau: between = S[tau, kappa] - S[tau, tau], X's within-pair sum
    S[tau, tau] / 2, Y's (S[kappa, kappa] - 2 S[tau, kappa] + S[tau, tau]) / 2 (d symmetric, zero
    on its diagonal), and Q = 2 between / (n + m) - m S[tau, tau] / ((n + m)(n - 1))
    - n (Y's twice) / ((n + m)(m - 1)), the within terms 0 for a single point."""
    tau = np.arange(length + 1, dtype=np.float64)[:, None]
    kappa = np.arange(length + 1, dtype=np.float64)[None, :]
    n, m = np.broadcast_arrays(tau, kappa - tau)
    valid = (n >= min_size) & (m >= min_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.where(valid, n + m, 1.0)
        c1 = 2 / total
        c2 = np.where(valid & (n > 1), m / (total * (n - 1)), 0.0)
        c3 = np.where(valid & (m > 1), n / (total * (m - 1)), 0.0)
    w_s = np.where(valid, c1 + 2 * c3, 0.0)
    w_tt = np.where(valid, c1 + c2 + c3, 0.0)
    w_kk = np.where(valid, c3, 0.0)
    mask = np.where(valid, 0.0, -np.inf)
    for a in (w_s, w_tt, w_kk, mask):
        a.setflags(write=False)
    return w_s, w_tt, w_kk, mask


def _q(s: np.ndarray, min_size: int) -> np.ndarray:
    """Q over the grid from prefix sums `s` (..., L + 1, L + 1); -inf where the split is not valid."""
    w_s, w_tt, w_kk, mask = _weights(s.shape[-1] - 1, min_size)
    diag = np.diagonal(s, axis1=-2, axis2=-1)
    q = w_s * s
    q -= w_tt * diag[..., :, None]
    q -= w_kk * diag[..., None, :]
    q += mask
    return q


def _distances(z: np.ndarray, alpha: float) -> np.ndarray:
    """|z_i - z_j|^alpha over the last axis of `z` (..., L) -> (..., L, L)."""
    d = np.abs(z[..., :, None] - z[..., None, :])
    return d if alpha == 1 else d ** alpha


def best_split(z, alpha: float = ALPHA, min_size: int = MIN_SIZE) -> tuple[int, int, float]:
    """(tau, kappa, Q) of the best split of one segment `z`; (-1, -1, -inf) when it is too short."""
    z = np.asarray(z, dtype=np.float64)
    if len(z) < 2 * min_size:
        return -1, -1, -np.inf
    q = _q(_prefix(_distances(z, alpha)), min_size)
    i = int(np.argmax(q))
    tau, kappa = divmod(i, len(z) + 1)
    return tau, kappa, float(q.flat[i])


def _perm_best(z: np.ndarray, perms: np.ndarray, alpha: float, min_size: int) -> np.ndarray:
    """The best Q of segment `z` under each row of `perms` (one permutation of its points each)."""
    zp = z[perms]
    return _q(_prefix(_distances(zp, alpha)), min_size).reshape(len(zp), -1).max(axis=1)


def e_divisive(series, sig_level: float = SIG_LEVEL, permutations: int = PERMUTATIONS, min_size: int = MIN_SIZE,
               alpha: float = ALPHA, seed: int = 0) -> list[Split]:
    """The change points of `series` (1-D, finite), in index order, by e-divisive means at
    `sig_level` with `permutations` permutations per test, segments of at least `min_size`
    points, distance exponent `alpha`; seeded."""
    z = np.asarray(series, dtype=np.float64)
    if z.ndim != 1 or not np.isfinite(z).all():
        raise ValueError("e_divisive: a 1-D series of finite values is needed")
    if not 0 < alpha <= 2:
        raise ValueError(f"e_divisive: alpha {alpha} is not in (0, 2] (2: only a change of mean is seen)")
    if min_size < 1 or permutations < 1:
        raise ValueError("e_divisive: min_size and permutations must be at least 1")
    rng = np.random.default_rng(seed)
    cuts = [0, len(z)]
    found: list[Split] = []
    best: dict[tuple[int, int], tuple[int, float]] = {}     # segment -> (tau, Q), computed once
    enough = int(np.floor(sig_level * (permutations + 1)))  # exceedances past which p > sig_level
    while True:
        segs = [(a, b) for a, b in zip(cuts, cuts[1:]) if b - a >= 2 * min_size]
        for a, b in segs:
            if (a, b) not in best:
                tau, _, q = best_split(z[a:b], alpha, min_size)
                best[(a, b)] = (a + tau, q)
        if not segs:
            break
        index, q = max((best[s] for s in segs), key=lambda t: t[1])
        # every segment's points permuted within it, in blocks of permutations; the count of
        # permutations whose best Q over all segments reaches the candidate's, stopping early
        step = max(1, _CHUNK // ((max(b - a for a, b in segs) + 1) ** 2))
        count, done, r = 0, 0, 16
        while done < permutations and count < enough:
            r = min(step, 2 * r, permutations - done)      # blocks of 32, 64, ...: an early stop costs little
            top = np.full(r, -np.inf)
            for a, b in segs:
                perms = rng.permuted(np.tile(np.arange(b - a), (r, 1)), axis=1)
                top = np.maximum(top, _perm_best(z[a:b], perms, alpha, min_size))
            count += int(np.count_nonzero(top >= q - 1e-12 * abs(q)))
            done += r
        p = (1 + count) / (permutations + 1)
        if count >= enough or p > sig_level:
            break
        found.append(Split(index=index, q=q, p=p, order=len(found) + 1))
        cuts = sorted([*cuts, index])
    return sorted(found, key=lambda s: s.index)
