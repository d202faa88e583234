"""Linear combinations of the servers' figures (a least-squares slope, a level's departure from a line), with an interval that holds under
unequal variance between delay levels: each level's own spread, Satterthwaite's degrees of
freedom (Welch's interval of a contrast of the levels), vectorised over leading axes (studies in
the calibration).

With two delay levels this is exactly Welch's interval of the difference of the levels' means
divided by their distance; the plain OLS t interval, which pools the variance, under-covers when
the spread grows with the delay (docs/statistics.md, what-if)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clef_prof.compare.welch import POWER, t_quantile


@dataclass(frozen=True)
class Coef:
    """Arrays over the leading axes: estimate, standard error, degrees of freedom and the
    interval's half width; `ok` False where a level has one server (no spread to judge it by)."""
    est: np.ndarray
    se: np.ndarray
    df: np.ndarray
    half: np.ndarray
    ok: np.ndarray


def detectable(se: float, df: float, confidence: float, draws: int = 20000) -> float:
    """The smallest |coefficient| the design detects (interval excluding 0) with probability POWER,
    at standard error `se` with `df` degrees of freedom. The estimated se varies from study to
    study (as sqrt(chi2_df / df)), which at the few df of small designs costs much power: the
    usual (t_q + t_power) x se states too little at small designs (2 + 2 servers: ~40% power,
    not 80%). Satterthwaite's df over-states that stability there, so the power is solved at
    df - 1 (at least 1): measured power at the stated figure 0.84-0.99 from 2 + 2 to 24 servers
    (tests/whatif/test_calibration.py). Solved on seeded draws of (Z, chi2_df): deterministic."""
    if not (se > 0 and np.isfinite(se)):
        return 0.0
    rng = np.random.default_rng(0)
    z = rng.standard_normal(draws)
    df = max(df - 1.0, 1.0) if np.isfinite(df) else df         # see the docstring
    w = rng.chisquare(df, draws) / df if np.isfinite(df) else np.ones(draws)
    cut = float(t_quantile(0.5 + confidence / 2, df)) * np.sqrt(w)
    lo, hi = 0.0, 10.0
    while np.mean(np.abs(hi + z) > cut) < POWER:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.mean(np.abs(mid + z) > cut) < POWER else (lo, mid)
    return hi * float(se)


def contrast(c: np.ndarray, y: np.ndarray, groups: np.ndarray, confidence: float,
             level: float | None = None) -> Coef:
    """The linear combination Σ c_i y_i (c, y: (..., n)) with its interval: its variance is
    Σ_g s_g² Σ_{i in g} c_i², s_g² the spread of the servers at level g (each level its own,
    inflated by n_g / (n_g - 1) as HC3 does: with Satterthwaite's df alone a small level whose
    spread is large under-covers, 0.90 at 6 + 2 servers), its df Satterthwaite's. `level`: the
    two-sided level of the interval if not `confidence` (a Bonferroni share)."""
    groups = np.asarray(groups)
    onehot = (groups[:, None] == np.arange(int(groups.max()) + 1)).astype(np.float64)     # (n, G)
    size = onehot.sum(0)
    est = (c * y).sum(-1)
    dev = y - ((y @ onehot) / size) @ onehot.T
    s2 = (dev ** 2) @ onehot / np.maximum(size - 1, 1)
    part = s2 * size / np.maximum(size - 1, 1) * ((c ** 2) @ onehot)
    var = part.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(var > 0, var ** 2 / (part ** 2 / np.maximum(size - 1, 1)).sum(-1), np.inf)
    q = t_quantile(0.5 + (confidence if level is None else level) / 2, df)
    se = np.sqrt(var)
    return Coef(est, se, df, q * se, np.broadcast_to(bool((size >= 2).all()), est.shape))


def slope(x: np.ndarray, y: np.ndarray, groups: np.ndarray, confidence: float) -> Coef:
    """The least-squares slope of y over x (..., n), `groups` (n,) numbering each server's delay
    level 0..G-1, with its interval (`contrast`: the slope is Σ c_i y_i)."""
    x = np.asarray(x, np.float64)
    xc = x - x.mean(-1, keepdims=True)
    return contrast(xc / (xc ** 2).sum(-1, keepdims=True), np.asarray(y, np.float64), groups, confidence)


def departure(x: np.ndarray, y: np.ndarray, groups: np.ndarray, j: int, level: float) -> Coef:
    """How far the mean of level j lies from the line through levels 0..j-1, extrapolated to
    level j's mean x, with its interval at `level`: a bend past level j - 1 when it excludes 0."""
    x, y, groups = np.asarray(x, np.float64), np.asarray(y, np.float64), np.asarray(groups)
    low, top = groups < j, groups == j
    xl = np.where(low, x, 0.0)
    nl = low.sum()
    mx = xl.sum(-1, keepdims=True) / nl
    xc = np.where(low, x - mx, 0.0)
    sxx = (xc ** 2).sum(-1, keepdims=True)
    at = (np.where(top, x, 0.0).sum(-1, keepdims=True) / top.sum())
    pred = np.where(low, 1.0 / nl, 0.0) + (at - mx) * xc / sxx        # the line's value at `at`
    c = np.where(top, 1.0 / top.sum(), 0.0) - pred
    keep = groups <= j
    return contrast(c[..., keep], y[..., keep], groups[keep], level)
