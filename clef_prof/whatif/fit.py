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
    """Arrays over the leading axes: estimate, standard error, degrees of freedom, the interval's
    half width and the smallest |coefficient| detected with probability POWER (two-sided test at
    1 - confidence); `ok` False where a level has one server (no spread to judge it by)."""
    est: np.ndarray
    se: np.ndarray
    df: np.ndarray
    half: np.ndarray
    mdc: np.ndarray
    ok: np.ndarray


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
    return Coef(est, se, df, q * se, (q + t_quantile(POWER, df)) * se,
                np.broadcast_to(bool((size >= 2).all()), est.shape))


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
