"""The verdict of a change from per-unit values: a Welch t interval between arms of independent units.

A unit is what varies from run to run: a capture for `compare`, a fresh server for `bench`.
Each unit gives one value of a metric (its ratio of sums over its batches or windows); the
interval of the change is Welch's t interval of the difference of the arms' unit means, with
Satterthwaite's degrees of freedom, on the logarithms of the values where every value is
positive (a relative change, reported as exp(CI) - 1) and on the values themselves otherwise
(counts that can be 0). Resampling a few units instead (a cluster bootstrap) captures only
(n - 1) / n of their variance and uses normal quantiles where a t with about 2(n - 1) degrees of
freedom is due: at 3 units per arm it calls noise a change several times too often (Field &
Welsh 2007; Bell & McCaffrey 2002; Imbens & Kolesár 2016). Below `MIN_UNITS` units per arm
there is no verdict.

Everything is vectorised over leading axes, so that a simulation of many studies runs the same
code as one comparison. The t quantile is computed here (the regularized incomplete beta
function by its continued fraction, inverted on ln t by bisection and Newton steps): SciPy is not a
dependency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_UNITS = 3          # units per arm below which a design gives no verdict
POWER = 0.8            # the power at which the smallest detectable change is stated


def _lbeta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lg = np.vectorize(math.lgamma, otypes=[np.float64])
    return lg(a) + lg(b) - lg(a + b)


def _betacf(a, b, x, iters: int = 400, eps: float = 1e-14):
    """The continued fraction of the incomplete beta function (modified Lentz), elementwise."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1.0 / d
    h = d.copy()
    for m in range(1, iters + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + aa / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            d = 1.0 / d
            delta = d * c
            h = h * delta
        if m % 8 == 0 and np.all(np.abs(delta - 1.0) < eps):
            break
    return h


def betainc(a, b, x, lbeta=None) -> np.ndarray:
    """The regularized incomplete beta function I_x(a, b), elementwise (0 at x <= 0, 1 at x >= 1);
    `lbeta`: log B(a, b) where the caller has it."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, x)))
    lb = _lbeta(a, b) if lbeta is None else np.broadcast_to(lbeta, a.shape)
    out = np.where(x <= 0, 0.0, 1.0)
    inner = (x > 0) & (x < 1)
    if not inner.any():
        return out
    a, b, x, lb = a[inner], b[inner], x[inner], lb[inner]
    front = np.exp(a * np.log(x) + b * np.log1p(-x) - lb)
    direct = x < (a + 1.0) / (a + b + 2.0)
    # the fraction converges fast on one side of the mean; the other side by symmetry
    aa, bb, xx = np.where(direct, a, b), np.where(direct, b, a), np.where(direct, x, 1.0 - x)
    f = front * _betacf(aa, bb, xx) / aa
    out[inner] = np.where(direct, f, 1.0 - f)
    return out


def t_quantile(p: float, df) -> np.ndarray:
    """The p quantile (0.5 <= p < 1) of Student's t with `df` > 0 degrees of freedom, elementwise;
    df = inf gives the normal quantile."""
    df = np.asarray(df, dtype=np.float64)
    if p == 0.5:
        return np.zeros_like(df)
    if not 0.5 < p < 1:
        raise ValueError("p must be in [0.5, 1)")
    tail = 2.0 * (1.0 - p)                   # P(|T| > t) = I_{df/(df+t^2)}(df/2, 1/2)
    finite = np.isfinite(df)
    z = _normal_quantile(p)
    out = np.full(df.shape, z)
    if finite.any():
        nu = df[finite]
        a = nu / 2.0
        lb = _lbeta(a, np.full_like(a, 0.5))
        # solved on u = ln t, where x = df/(df+t^2) and 1 - x are both exact (no 1 - x near 1 to
        # lose, at large df or far tails): the normal quantile bounds t below, and the Cauchy's
        # (df = 1) above for df >= 1, doubled until it holds for df < 1; bisection brackets the
        # root, then Newton steps (d tail / du = -2 t f(t)) kept inside the bracket
        lo = np.full_like(nu, math.log(z))
        hi = np.full_like(nu, math.log(max(math.tan(math.pi * (p - 0.5)), z)))
        for _ in range(64):
            low = _t_tail(a, nu, lb, hi) > tail
            if not low.any():
                break
            hi = np.where(low, hi + math.log(2.0), hi)
        while (hi - lo).max() > 1e-3:        # a relative width of t; ~13 halvings at df >= 1
            mid = 0.5 * (lo + hi)
            below = _t_tail(a, nu, lb, mid) > tail
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        u = 0.5 * (lo + hi)
        for _ in range(6):
            f = _t_tail(a, nu, lb, u) - tail
            slope = -2.0 * np.exp(u - lb - 0.5 * np.log(nu) - (a + 0.5) * np.log1p(np.exp(2.0 * u) / nu))
            u = np.clip(u - f / slope, lo, hi)
        out[finite] = np.exp(u)
    return out


def _t_tail(a, nu, lb, u) -> np.ndarray:
    """P(|T| > t) at t = exp(u) with nu = 2a degrees of freedom: I_x(a, 1/2), x = nu / (nu + t^2), or
    1 - I_(1-x)(1/2, a) where 1 - x is the smaller, each of x and 1 - x computed without cancellation."""
    s = 2.0 * u - np.log(nu)                 # ln(t^2 / nu)
    x, y = 1.0 / (1.0 + np.exp(s)), 1.0 / (1.0 + np.exp(-s))
    far = s > 0
    out = np.empty_like(s)
    out[far] = betainc(a[far], 0.5, x[far], lb[far])
    out[~far] = 1.0 - betainc(0.5, a[~far], y[~far], lb[~far])
    return out


def _normal_quantile(p: float) -> float:
    """The normal quantile, by bisection on erf (math's erf is exact to double precision)."""
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class UnitInterval:
    """Welch's interval of arm - baseline over leading axes; `log` rows are on the log scale.

    diff, lo, hi, se, mdc: on the scale of the row (log of the values, or the values); mdc is
    the change the design detects with probability `POWER` (a two-sided test at 1 - confidence),
    the spread being the measured one: averaged over the studies that print it, a true change of
    mdc is found POWER of the time (`detect_factor`); df: Satterthwaite's degrees of freedom (inf when neither
    arm varies)."""

    log: np.ndarray
    diff: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    se: np.ndarray
    df: np.ndarray
    mdc: np.ndarray
    n_base: int
    n_arm: int

    @property
    def judged(self) -> bool:
        return min(self.n_base, self.n_arm) >= MIN_UNITS

    def pct(self, base_value) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, mdc) in % of the baseline: exp(.) - 1 on log rows, . / base_value on the others."""
        base = np.asarray(base_value, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            lin = [100.0 * v / np.abs(base) for v in (self.lo, self.hi, self.mdc)]
        rel = [100.0 * np.expm1(v) for v in (self.lo, self.hi, self.mdc)]
        return tuple(np.where(self.log, r, li) for r, li in zip(rel, lin))

    def absolute(self, base_value) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, mdc) in the metric's unit: base_value * (exp(.) - 1) on log rows."""
        base = np.asarray(base_value, dtype=np.float64)
        rel = [base * np.expm1(v) for v in (self.lo, self.hi, self.mdc)]
        return tuple(np.where(self.log, r, v) for r, v in zip(rel, (self.lo, self.hi, self.mdc)))


def unit_interval(base, arm, confidence: float) -> UnitInterval:
    """Welch's interval of the change from per-unit values: base (..., n_base), arm (..., n_arm).

    Each row is on the log scale where all its values (both arms) are positive, else on the
    values. Needs at least 2 units per arm for a spread; a verdict needs `MIN_UNITS`."""
    base, arm = np.asarray(base, dtype=np.float64), np.asarray(arm, dtype=np.float64)
    nb, na = base.shape[-1], arm.shape[-1]
    if min(nb, na) < 2:
        raise ValueError("a spread needs at least 2 units per arm")
    log = (base > 0).all(-1) & (arm > 0).all(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tb = np.where(log[..., None], np.log(np.where(base > 0, base, 1.0)), base)
        ta = np.where(log[..., None], np.log(np.where(arm > 0, arm, 1.0)), arm)
    vb, va = tb.var(-1, ddof=1) / nb, ta.var(-1, ddof=1) / na
    diff = ta.mean(-1) - tb.mean(-1)
    var = vb + va
    se = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(var > 0, var ** 2 / (vb ** 2 / (nb - 1) + va ** 2 / (na - 1)), np.inf)
    q = t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
    mdc = detect_factor(df, confidence) * se
    return UnitInterval(log, diff, diff - q * se, diff + q * se, se, df, mdc, nb, na)


@dataclass(frozen=True)
class Drift:
    """The linear trend in run order that `ordered_interval` estimates beside the change: per
    unit slot, on the row's scale (log: exp(.) - 1 is the fraction per slot)."""

    slope: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def ordered_interval(base, arm, base_slot, arm_slot, confidence: float) -> tuple[UnitInterval, Drift]:
    """The change arm - baseline from units measured one after another, each at a slot of the run
    order (servers started in turn: ABBA), with a linear drift in run order fitted beside it:
    value = a + change * [arm] + drift * slot + error, least squares, df = units - 3.

    ABBA cancels a linear drift in the difference of means, but Welch's interval then counts the
    drift as spread between units (power 54% -> 42% at 1% drift per slot, 4 servers an arm); the
    fit removes it and says how large it is (`Drift`). Rows over leading axes; the log scale where
    every value of a row is positive, as `unit_interval`."""
    base, arm = np.asarray(base, dtype=np.float64), np.asarray(arm, dtype=np.float64)
    nb, na = base.shape[-1], arm.shape[-1]
    if min(nb, na) < 2:
        raise ValueError("a spread needs at least 2 units per arm")
    slot = np.r_[np.asarray(base_slot, dtype=np.float64), np.asarray(arm_slot, dtype=np.float64)]
    x = np.c_[np.ones(nb + na), np.r_[np.zeros(nb), np.ones(na)], slot - slot.mean()]
    if np.linalg.matrix_rank(x) < 3:
        raise ValueError("the run order does not separate the arms from the drift")
    xtx_inv = np.linalg.inv(x.T @ x)
    y = np.concatenate([base, arm], axis=-1)
    log = (y > 0).all(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(log[..., None], np.log(np.where(y > 0, y, 1.0)), y)
    beta = y @ (xtx_inv @ x.T).T
    resid = y - beta @ x.T
    df = float(nb + na - 3)             # >= 1: two units an arm at least
    s2 = (resid ** 2).sum(-1) / df
    se, se_d = np.sqrt(s2 * xtx_inv[1, 1]), np.sqrt(s2 * xtx_inv[2, 2])
    df = np.where(s2 > 0, df, np.inf)
    q = t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
    diff, d = beta[..., 1], beta[..., 2]
    mdc = detect_factor(df, confidence) * se
    return (UnitInterval(log, diff, diff - q * se, diff + q * se, se, df, mdc, nb, na),
            Drift(d, d - q * se_d, d + q * se_d))


def beyond(lo, hi) -> np.ndarray:
    """The interval excludes 0 (an interval that ends at 0 holds it)."""
    return (np.asarray(lo) > 0) | (np.asarray(hi) < 0)


def spread_pct(values) -> float | None:
    """The spread between the units of one arm: the standard deviation of their log values, in %
    (about the coefficient of variation); None below 2 units or with a value <= 0."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2 or (v <= 0).any():
        return None
    return float(100.0 * np.log(v).std(ddof=1))


# ---------------------------------------------------------------------------------------------
# the power statement: the change found POWER of the time, the spread being estimated

_GRID = 121            # quadrature nodes of the spread's sampling distribution
_DF_NODES = 33         # nodes of the table in 1/df on [0, 1/2] (a verdict's df >= MIN_UNITS - 1 = 2)


def _norm_cdf(x: np.ndarray) -> np.ndarray:
    """Φ(x) elementwise, by the Chebyshev fit of erfc (Numerical Recipes' erfcc; relative error
    below 1.2e-7): SciPy is not a dependency, and math.erf one element at a time is too slow."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886087 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    half = 0.5 * t * np.exp(poly)            # Φ(-|x|)
    return np.where(x >= 0, 1.0 - half, half)


def _spread_nodes(df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, w): nodes and weights (rows summing to 1) of S = se_hat / se = sqrt(V / df), V ~ χ²(df),
    per df (rows; inf gives S = 1). On u = ln s the density is ∝ exp(df u - df e^(2u) / 2), about
    1 / sqrt(2 df) wide around 0: the nodes span that width in steps of a fixed fraction of it."""
    df = np.asarray(df, dtype=np.float64)[:, None]
    finite = np.isfinite(df)
    d = np.where(finite, df, 1e12)
    t = np.linspace(-40.0, 8.0, _GRID)[None, :]
    u = t / np.sqrt(d)
    logw = d * u - 0.5 * d * np.exp(2.0 * u)
    w = np.exp(logw - logw.max(1, keepdims=True)) / np.sqrt(d)     # du = dt / sqrt(df)
    w /= w.sum(1, keepdims=True)
    return np.exp(u), w


def _power_of(lam: np.ndarray, q: np.ndarray, s: np.ndarray, w: np.ndarray, two_sided: bool) -> np.ndarray:
    """P(reject) of a t test at noncentrality lam (rows, or rows x k): E_S[Φ(lam - q S)] (+ the far
    tail E_S[Φ(-lam - q S)] when two-sided): the noncentral t's distribution function."""
    lam3 = lam[..., None] if lam.ndim == 2 else lam[:, None, None]
    qs = (q[:, None] * s)[:, None, :]
    p = (_norm_cdf(lam3 - qs) * w[:, None, :]).sum(-1)
    if two_sided:
        p += (_norm_cdf(-lam3 - qs) * w[:, None, :]).sum(-1)
    return p if lam.ndim == 2 else p[:, 0]


def _factor_at(df: np.ndarray, confidence: float | None, power: float, two_sided: bool) -> np.ndarray:
    """c per df such that a true change of c x se_hat (se_hat: the measured standard error, itself
    random) is found with probability `power`, averaged over the spread that prints it: with S1,
    S2 independent copies of se_hat / se, E_S1[P(Z + c S1 > q S2)] = power. `confidence` None:
    the critical value q is 0 (a gate on the point change)."""
    s, w = _spread_nodes(df)
    q = np.zeros(len(df)) if confidence is None else t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
    lam = np.linspace(0.0, 40.0, 321)
    pi = _power_of(np.broadcast_to(lam, (len(df), len(lam))).copy(), q, s, w, two_sided)   # (rows, lam)
    step = lam[1] - lam[0]

    def mean_power(c):
        x = np.clip(c[:, None] * s / step, 0, len(lam) - 1.000001)
        i = x.astype(np.int64)
        f = x - i
        rows = np.arange(len(df))[:, None]
        val = pi[rows, i] * (1 - f) + pi[rows, i + 1] * f
        return (val * w).sum(1)

    lo, hi = np.zeros(len(df)), np.full(len(df), 20.0)
    for _ in range(48):
        mid = 0.5 * (lo + hi)
        low = mean_power(mid) < power
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return 0.5 * (lo + hi)


_TABLES: dict = {}


def detect_factor(df, confidence: float | None, power: float = POWER, two_sided: bool = True) -> np.ndarray:
    """The multiple of the measured standard error at which a change is found with probability
    `power` (see `_factor_at`), elementwise over df >= 2 (below: as at 2; inf: a spread known exactly). It replaces
    q + t_power, which took the measured spread for the true one: at 3 units an arm that sum was
    found 66-76% of the time, not 80%. Tabled once per (confidence, power) on 1/df and interpolated."""
    key = (confidence, power, two_sided)
    if key not in _TABLES:
        x = np.linspace(0.0, 0.5, _DF_NODES)
        with np.errstate(divide="ignore"):
            nodes = np.where(x > 0, 1.0 / x, np.inf)
        _TABLES[key] = (x, _factor_at(nodes, confidence, power, two_sided))
    x, f = _TABLES[key]
    d = np.asarray(df, dtype=np.float64)
    with np.errstate(divide="ignore"):
        inv = np.where(np.isfinite(d), 1.0 / np.maximum(d, 2.0), 0.0)
    return np.interp(inv, x, f)


def t_sf(t, df) -> np.ndarray:
    """P(T > t) for Student's t with `df` degrees of freedom (inf: the normal), elementwise."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=np.float64), np.asarray(df, dtype=np.float64))
    out = _norm_cdf(-t)
    fin = np.isfinite(df) & np.isfinite(t)
    if fin.any():
        d, x = df[fin], t[fin]
        half = 0.5 * betainc(d / 2.0, 0.5, d / (d + x * x))
        out = out.copy()
        out[fin] = np.where(x > 0, half, 1.0 - half)
    return out


def gate_detectable(threshold, sign, se, df, confidence: float | None) -> np.ndarray:
    """The true change (on the row's scale) at which a gate fires 80% of the time: `sign` +1 for a
    gate that fires above `threshold` (> and >=), -1 below. confidence: the gate reads that
    interval's end (the two-sided interval's, at 1 - (1 - confidence) / 2); None: the point change.
    Its one-sided power, the spread being measured (`detect_factor`)."""
    df = np.where(np.isfinite(np.asarray(df, dtype=np.float64)), df, np.inf)
    c = detect_factor(df, confidence, POWER, two_sided=False)
    return np.asarray(threshold) + np.asarray(sign) * c * np.asarray(se)


def gate_null_rate(threshold, sign, se, df, confidence: float | None) -> np.ndarray:
    """The share of runs with no change in which a gate fires, at a spread of `se` (the measured
    one): P(sign (diff - q se - threshold) > 0) = P(T > sign threshold / se + q), q = 0 for a gate
    on the point change."""
    df = np.where(np.isfinite(np.asarray(df, dtype=np.float64)), df, np.inf)
    q = 0.0 if confidence is None else t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.asarray(sign) * np.asarray(threshold) / np.asarray(se)
    return t_sf(z + q, df)


# ---------------------------------------------------------------------------------------------
# families of verdicts

FAMILIES = ("none", "holm")


def p_value(diff, se, df) -> np.ndarray:
    """Two-sided p of Welch's t test of no change (0 where se is 0 and diff is not, 1 where both are)."""
    diff, se = np.asarray(diff, dtype=np.float64), np.asarray(se, dtype=np.float64)
    df = np.where(np.isfinite(np.asarray(df, dtype=np.float64)), df, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(diff) / se
    t = np.where(se > 0, t, np.where(diff != 0, np.inf, 0.0))
    return np.minimum(1.0, 2.0 * t_sf(t, df))


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values over the last axis (NaN: not in the family): reject at
    family-wise level α where adjusted p <= α. Holds the chance of any false rejection to α
    whatever the dependence between the figures (Holm 1979)."""
    p = np.asarray(p, dtype=np.float64)
    inside = np.isfinite(p)
    m = inside.sum(-1, keepdims=True)
    order = np.argsort(np.where(inside, p, np.inf), axis=-1, kind="stable")
    ps = np.take_along_axis(np.where(inside, p, np.inf), order, -1)
    rank = np.arange(p.shape[-1])
    fin = np.isfinite(ps)
    adj = np.minimum(1.0, np.maximum.accumulate(np.where(fin, (m - rank) * np.where(fin, ps, 0.0), np.nan), axis=-1))
    out = np.empty_like(p)
    np.put_along_axis(out, order, adj, -1)
    return np.where(inside, out, np.nan)


def family_bound(m: int, confidence: float) -> float:
    """The chance that at least one of m figures judged each at `confidence` says beyond noise when
    none changed, at most (Šidák: exact for independent figures, an upper bound for correlated
    two-sided tests of normal figures): 1 - confidence^m."""
    return 1.0 - confidence ** m
