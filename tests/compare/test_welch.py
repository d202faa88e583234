"""The verdict's arithmetic (`compare.welch`) against oracles written here, none of them the code's
own method: the t distribution by Gauss-Legendre integration of its density, closed-form
quantiles at 1, 2 and 4 degrees of freedom, printed t tables, the incomplete beta function by
integration and by its closed forms, and Welch's interval, Satterthwaite's degrees of freedom and
the smallest detectable change worked out by hand on small data."""
from __future__ import annotations

import math

import numpy as np
import pytest

from clef_prof.compare import welch

_X, _W = np.polynomial.legendre.leggauss(48)


def _gl(f, a: float, b: float, pieces: int = 64) -> float:
    """∫_a^b f by Gauss-Legendre on `pieces` equal pieces."""
    edges = np.linspace(a, b, pieces + 1)
    return _gl_on(f, edges)


def _gl_on(f, edges: np.ndarray) -> float:
    lo, hi = edges[:-1, None], edges[1:, None]
    return float((0.5 * (hi - lo) * _W * f(0.5 * (hi - lo) * _X + 0.5 * (hi + lo))).sum())


def _graded(f, a: float, b: float) -> float:
    """∫_a^b f on pieces halving towards both ends (2^-200 of the way): accurate for an integrable
    power singularity at an end and for a peak of any width there."""
    h = (b - a) / 2 * 0.5 ** np.arange(201.0)
    return _gl_on(f, np.unique(np.r_[a, a + h[::-1], b - h, b]))


def t_density(t, nu: float):
    """Student's t density, normalised with the gamma function."""
    c = math.exp(math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2)) / math.sqrt(nu * math.pi)
    return c * np.exp(-(nu + 1) / 2 * np.log1p(np.asarray(t) ** 2 / nu))


def t_sf(q: float, nu: float) -> float:
    """P(T > q), q >= 0. With t = sqrt(nu) cot φ the density is proportional to sin(φ)^(nu-1), so the
    tail is ∫ sin^(nu-1) from 0 to atan(sqrt(nu)/q) over twice the integral to π/2 (no gamma
    function, no 1 - F to cancel; a singularity below nu = 1 sits at 0, where the graded pieces
    resolve it); nu = inf: the normal density in θ = atan(t), over sqrt(2π)."""
    if math.isinf(nu):
        f = lambda th: np.exp(-np.tan(th) ** 2 / 2) / np.cos(th) ** 2       # noqa: E731
        return _gl(f, math.atan(q), math.pi / 2) / math.sqrt(2 * math.pi)
    f = lambda phi: np.sin(phi) ** (nu - 1)                                 # noqa: E731
    return _graded(f, 0.0, math.atan2(math.sqrt(nu), q)) / (2 * _graded(f, 0.0, math.pi / 2))


def t_quantile_oracle(p: float, nu: float) -> float:
    """The quantile by bisection on the integrated tail (a different method from the code's)."""
    lo, hi = 0.0, 1e3
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_sf(mid, nu) > 1 - p else (lo, mid)
    return 0.5 * (lo + hi)


def closed_form(p: float, nu: int) -> float:
    """Student t quantiles in closed form (Hill 1970; Wikipedia 'Student's t-distribution')."""
    if nu == 1:
        return math.tan(math.pi * (p - 0.5))
    if nu == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    alpha = 4 * p * (1 - p)                  # nu == 4
    q = math.cos(math.acos(math.sqrt(alpha)) / 3) / math.sqrt(alpha)
    return 2 * math.sqrt(q - 1)


PS = (0.5000001, 0.55, 0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995, 0.99995)


@pytest.mark.parametrize("nu", [1, 2, 4])
def test_t_quantile_closed_forms(nu):
    for p in PS if nu < 4 else PS[1:]:         # nu = 4's form cancels near p = 1/2
        got = float(welch.t_quantile(p, [nu])[0])
        assert got == pytest.approx(closed_form(p, nu), rel=1e-11), p


def test_the_oracles_agree_with_the_closed_forms():
    """The integration oracles themselves, where the closed forms give the answer."""
    for nu in (1, 2, 4):
        for p in (0.6, 0.9, 0.995):
            assert t_sf(closed_form(p, nu), nu) == pytest.approx(1 - p, rel=1e-12)
    assert t_quantile_oracle(0.975, 1) == pytest.approx(12.706204736174707, rel=1e-12)


@pytest.mark.parametrize("nu", [1.3, 2.7, 3.0, 5.5, 9.2, 17.0, 60.0, 250.0, 1e4, 1e5])
def test_t_quantile_against_the_integrated_density(nu):
    """At every p the CDF integrated here at the code's quantile is p; the residual over the density
    is the quantile's own error, held below 1e-9 relative (the approximation is that tight)."""
    for p in PS[1:]:
        q = float(welch.t_quantile(p, np.array([nu]))[0])
        err = ((1 - p) - t_sf(q, nu)) / float(t_density(q, nu))
        assert abs(err) <= 1e-9 * q + 1e-13, (nu, p, q, err)


@pytest.mark.parametrize("nu", [0.5, 0.75])
def test_t_quantile_below_one_degree_of_freedom(nu):
    """df < 1 (allowed; Welch's df is >= 1 in practice): the Cauchy bound no longer holds and the
    bracket is widened; the upper tail integrated here is 1 - p."""
    for p in (0.8, 0.975, 0.995):
        q = float(welch.t_quantile(p, [nu])[0])
        assert t_sf(q, nu) == pytest.approx(1 - p, rel=1e-9), (nu, p, q)


def test_t_quantile_large_df_is_not_zero():
    """Large df (bug before: the solver on x = df/(df+t^2) ran into x = 1 and gave t = 0 at
    df >= 1e4 for p = 0.55, at df 1e6 for every p)."""
    got = welch.t_quantile(0.8, [1e4, 1e5, 1e6])
    z = 0.8416212335729143
    assert np.all(got > z) and np.all(np.diff(got) < 0)
    assert got[-1] == pytest.approx(z, rel=1e-5)


def test_t_quantile_printed_tables():
    """Two-sided 90/95/99/99.9% columns of a printed t table (4 decimals) and z."""
    table = {0.95: [6.3138, 2.9200, 2.3534, 2.1318, 2.0150, 1.8125, 1.7247, 1.6973, 1.6577, 1.6449],
             0.975: [12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.2281, 2.0860, 2.0423, 1.9799, 1.9600],
             0.995: [63.6567, 9.9248, 5.8409, 4.6041, 4.0321, 3.1693, 2.8453, 2.7500, 2.6174, 2.5758],
             0.9995: [636.6192, 31.5991, 12.9240, 8.6103, 6.8688, 4.5869, 3.8495, 3.6460, 3.3735, 3.2905]}
    df = [1, 2, 3, 4, 5, 10, 20, 30, 120, np.inf]
    for p, want in table.items():
        assert welch.t_quantile(p, df) == pytest.approx(want, abs=6e-5), p


def test_normal_quantile_digits():
    """df = inf: z to double precision (the normal CDF integrated here, and the published digits)."""
    z = welch.t_quantile(0.975, [np.inf, np.inf])
    assert z.tolist() == pytest.approx([1.959963984540054] * 2, rel=1e-14)
    for p in (0.8, 0.995, 0.9995):
        got = float(welch.t_quantile(p, np.inf))
        assert ((1 - p) - t_sf(got, math.inf)) / (math.exp(-got * got / 2) / math.sqrt(2 * math.pi)) == pytest.approx(
            0, abs=1e-12)


def test_t_quantile_shape_and_bad_p():
    df = np.array([[1.0, np.inf], [3.0, 7.5]])
    assert welch.t_quantile(0.5, df).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    got = welch.t_quantile(0.975, df)
    assert got.shape == (2, 2)
    assert got[0, 0] == pytest.approx(12.706204736174707, rel=1e-11)
    assert got[0, 1] == pytest.approx(1.959963984540054, rel=1e-14)
    assert got[1, 0] == pytest.approx(3.182446305284263, rel=1e-11)
    for p in (0.4999, 1.0, 1.5, 0.0):
        with pytest.raises(ValueError, match=r"p must be in \[0.5, 1\)"):
            welch.t_quantile(p, [3.0])


def beta_oracle(a: float, b: float, x: float) -> float:
    """I_x(a, b) for b >= 1 by integrating the beta density: t^(a-1) (1-t)^(b-1) directly where a >= 1
    (smooth), with t = s^(1/a) where a < 1 (then (1/a) (1 - s^(1/a))^(b-1), smooth); B(a, b) by lgamma."""
    lb = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    if a >= 1:
        part = _gl(lambda t: np.exp((a - 1) * np.log(t) + (b - 1) * np.log1p(-t) - lb), 0.0, x, 128)
    else:
        part = _gl(lambda v: (1 - v ** (1 / a)) ** (b - 1) / a, 0.0, x ** a, 128) / math.exp(lb)
    return part


@pytest.mark.parametrize("a, b", [(2.5, 3.7), (0.5, 6.0), (12.0, 1.5), (40.0, 25.0), (1.7, 1.0)])
def test_betainc_against_integration(a, b):
    """Points on both sides of (a+1)/(a+b+2), where the code turns to the symmetric fraction."""
    xs = np.array([0.02, 0.15, (a + 1) / (a + b + 2), 0.45, 0.62, 0.8, 0.97])
    got = welch.betainc(a, b, xs)
    want = [beta_oracle(a, b, x) for x in xs]
    assert got == pytest.approx(want, rel=1e-10, abs=1e-15)


def test_betainc_closed_forms_and_edges():
    x = np.array([0.0, 1e-6, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999999, 1.0])
    assert welch.betainc(3.3, 1.0, x) == pytest.approx(x ** 3.3, rel=1e-12, abs=1e-300)
    with np.errstate(divide="ignore"):
        assert welch.betainc(1.0, 4.2, x) == pytest.approx(-np.expm1(4.2 * np.log1p(-x)), rel=1e-12, abs=1e-300)
    assert welch.betainc(0.5, 0.5, x) == pytest.approx(2 / np.pi * np.arcsin(np.sqrt(x)), rel=1e-12, abs=1e-300)
    assert welch.betainc(2.0, 3.0, [0.0, 1.0]).tolist() == [0.0, 1.0]
    assert welch.betainc(2.0, 3.0, [-0.5, 1.5, 1.0 + 1e-12]).tolist() == [0.0, 1.0, 1.0]   # the CDF outside [0, 1]
    # a given log B(a, b) is used as given; broadcasting over leading axes
    lb = math.lgamma(2.0) + math.lgamma(3.0) - math.lgamma(5.0)
    grid = welch.betainc(np.array([[2.0], [2.0]]), 3.0, np.array([0.25, 0.5, 0.75]), lb)
    want = [1 - (1 - x) ** 4 - 4 * x * (1 - x) ** 3 for x in (0.25, 0.5, 0.75)]   # binomial: P(Bin(4, x) >= 2)
    assert grid.shape == (2, 3) and grid == pytest.approx(np.array([want, want]), rel=1e-13)


# ---------------------------------------------------------------------------------------------
# Welch's interval by hand


def _hand(base: list[float], arm: list[float], log: bool, confidence: float) -> dict:
    tb = [math.log(v) for v in base] if log else list(base)
    ta = [math.log(v) for v in arm] if log else list(arm)
    nb, na = len(tb), len(ta)
    mb, ma = sum(tb) / nb, sum(ta) / na
    sb = sum((v - mb) ** 2 for v in tb) / (nb - 1)
    sa = sum((v - ma) ** 2 for v in ta) / (na - 1)
    vb, va = sb / nb, sa / na
    se = math.sqrt(vb + va)
    df = (vb + va) ** 2 / (vb ** 2 / (nb - 1) + va ** 2 / (na - 1))
    q = t_quantile_oracle(1 - (1 - confidence) / 2, df)
    # the factor itself is checked against a Monte Carlo of its definition below
    return {"diff": ma - mb, "se": se, "df": df, "lo": ma - mb - q * se, "hi": ma - mb + q * se,
            "mdc": float(welch.detect_factor(df, confidence)) * se}


@pytest.mark.parametrize("base, arm, log, confidence", [
    ([10.0, 12.0, 11.0], [13.0, 15.0, 14.0, 16.0], True, 0.95),
    ([0.21, 0.35, 0.28, 0.30], [0.19, 0.22, 0.26], True, 0.9),        # values below 1 stay on logs
    ([0.0, 2.0, 1.0], [3.0, 5.0, 4.0], False, 0.95),                  # a 0 in the baseline: linear
    ([4.0, 2.0, 7.0], [3.0, 0.0, 4.0, 1.0, 2.0], False, 0.99),        # a 0 in the arm: linear
    ([-1.5, 2.0, 0.5], [1.0, 3.5], False, 0.95),
])
def test_unit_interval_by_hand(base, arm, log, confidence):
    w = welch.unit_interval(base, arm, confidence)
    h = _hand(base, arm, log, confidence)
    assert bool(w.log) is log
    for k in ("diff", "se", "df", "lo", "hi", "mdc"):
        assert float(getattr(w, k)) == pytest.approx(h[k], rel=1e-9, abs=1e-12), k
    assert (w.n_base, w.n_arm) == (len(base), len(arm))
    assert w.judged is (min(len(base), len(arm)) >= 3)


def test_unit_interval_rows_are_independent():
    """Leading axes: each row judged on its own scale, as if alone."""
    base = np.array([[10.0, 12.0, 11.0], [0.0, 2.0, 1.0], [3.0, 3.5, 2.5]])
    arm = np.array([[13.0, 15.0, 14.0], [3.0, 5.0, 4.0], [0.0, 1.0, 2.0]])
    w = welch.unit_interval(base, arm, 0.95)
    assert w.log.tolist() == [True, False, False]
    for i in range(3):
        one = welch.unit_interval(base[i], arm[i], 0.95)
        for k in ("diff", "lo", "hi", "se", "df", "mdc"):
            assert getattr(w, k)[i] == pytest.approx(float(getattr(one, k)), rel=1e-12)
    h = _hand(list(base[0]), list(arm[0]), True, 0.95)
    assert w.hi[0] == pytest.approx(h["hi"], rel=1e-9) and w.df[2] == pytest.approx(
        _hand(list(base[2]), list(arm[2]), False, 0.95)["df"], rel=1e-12)


def test_no_spread_gives_a_point_and_infinite_df():
    """(Values whose logs' means are exact: 4 equal logs sum exactly.)"""
    w = welch.unit_interval([1.0, 1.0, 1.0], [6.0, 6.0, 6.0, 6.0], 0.95)
    assert bool(w.log) and float(w.df) == math.inf and float(w.se) == 0.0
    assert float(w.lo) == float(w.hi) == float(w.diff) == pytest.approx(math.log(6), rel=1e-15)
    assert float(w.mdc) == 0.0
    w = welch.unit_interval([0.0, 0.0, 0.0], [2.0, 2.0, 2.0], 0.95)
    assert not bool(w.log) and float(w.df) == math.inf and (float(w.lo), float(w.hi)) == (2.0, 2.0)


def test_satterthwaite_df_bounds():
    """min(nb, na) - 1 <= df <= nb + na - 2, reached when one arm's variance dominates / when the
    arms' variances per unit are equal and the sizes equal."""
    rng = np.random.default_rng(7)
    base, arm = rng.normal(100, [[1.0], [1e-4], [1.0]], (3, 4)), rng.normal(100, [[1e-4], [1.0], [1.0]], (3, 6))
    base[2] = [99.0, 101.0, 100.0, 100.0]
    arm[2] = [99.0, 101.0, 100.0, 100.0, 99.0, 101.0]
    w = welch.unit_interval(np.abs(base), np.abs(arm), 0.95)
    assert w.df[0] == pytest.approx(3.0, rel=1e-4) and w.df[1] == pytest.approx(5.0, rel=1e-4)
    assert 3.0 < w.df[2] < 8.0


def test_fewer_than_two_units_refused():
    with pytest.raises(ValueError, match="at least 2 units"):
        welch.unit_interval([1.0], [2.0, 3.0], 0.95)
    with pytest.raises(ValueError, match="at least 2 units"):
        welch.unit_interval([1.0, 2.0, 3.0], [2.0], 0.95)
    w = welch.unit_interval([0.0, 1.0], [2.0, 3.0], 0.95)     # linear (a 0); variances 1/2 and 1/2
    assert not w.judged and float(w.df) == pytest.approx(2.0, rel=1e-12)   # (1/4 + 1/4)^2 / (1/16 + 1/16)
    assert float(w.hi) == pytest.approx(2 + closed_form(0.975, 2) * math.sqrt(0.5), rel=1e-11)


def test_judged_from_three_units_per_arm():
    assert welch.MIN_UNITS == 3
    three = [1.0, 2.0, 3.0]
    assert not welch.unit_interval([1.0, 2.0], three, 0.95).judged
    assert not welch.unit_interval(three, [1.0, 2.0], 0.95).judged
    assert welch.unit_interval(three, three, 0.95).judged
    assert welch.unit_interval(three, three + [4.0], 0.95).judged


def test_pct_and_absolute():
    """Log rows: 100 (e^v - 1) % and base (e^v - 1); linear rows: 100 v / |base| % and v."""
    base = np.array([[10.0, 12.0, 11.0], [0.0, -2.0, -1.0]])
    arm = np.array([[13.0, 15.0, 14.0], [-3.0, -5.0, -4.0]])
    w = welch.unit_interval(base, arm, 0.95)
    bv = np.array([11.0, -2.5])
    lo, hi, mdc = w.pct(bv)
    alo, ahi, amdc = w.absolute(bv)
    for row in (0, 1):
        h = _hand(list(base[row]), list(arm[row]), row == 0, 0.95)
        if row == 0:
            want = [100 * math.expm1(h[k]) for k in ("lo", "hi", "mdc")]
            want_abs = [11.0 * math.expm1(h[k]) for k in ("lo", "hi", "mdc")]
        else:
            want = [100 * h[k] / 2.5 for k in ("lo", "hi", "mdc")]
            want_abs = [h[k] for k in ("lo", "hi", "mdc")]
        assert [lo[row], hi[row], mdc[row]] == pytest.approx(want, rel=1e-9)
        assert [alo[row], ahi[row], amdc[row]] == pytest.approx(want_abs, rel=1e-9)
    assert hi[1] < 0 and lo[0] > 0     # the second row's change is -3 on a baseline of magnitude 2.5: -120%


def test_beyond_holds_its_ends():
    lo = np.array([0.0, -1.0, 0.5, -1.0, -1.0, -2.0, 1e-300])
    hi = np.array([1.0, 0.0, 0.9, -0.5, 1.0, -1e-300, 2.0])
    assert welch.beyond(lo, hi).tolist() == [False, False, True, True, False, True, True]
    assert welch.beyond(0.5, 0.7) and not welch.beyond(-0.5, 0.7)


def test_spread_pct_by_hand():
    assert welch.spread_pct([100.0, 110.0, 121.0]) == pytest.approx(100 * math.log(1.1), rel=1e-12)
    assert welch.spread_pct([100.0, 110.0]) == pytest.approx(100 * math.log(1.1) / math.sqrt(2), rel=1e-12)
    assert welch.spread_pct([0.5, 0.6, 0.55]) == pytest.approx(
        100 * math.sqrt(sum((math.log(v) - sum(map(math.log, (0.5, 0.6, 0.55))) / 3) ** 2
                            for v in (0.5, 0.6, 0.55)) / 2), rel=1e-12)
    assert welch.spread_pct([5.0]) is None
    assert welch.spread_pct([]) is None
    assert welch.spread_pct([3.0, 0.0, 4.0]) is None
    assert welch.spread_pct([3.0, -1.0, 4.0]) is None


# ---------------------------------------------------------------------------------------------
# the power statement


@pytest.mark.parametrize("df, confidence", [(2.0, 0.95), (4.0, 0.95), (7.3, 0.9), (14.0, 0.99), (60.0, 0.95)])
def test_detect_factor_is_its_definition_by_monte_carlo(df, confidence):
    """c = detect_factor: a true change of c x se_hat, se_hat = se x S1 (S1 = sqrt(χ²_df / df), the
    measured spread), is found 80% of the time by the t test at q = t_(1-α/2, df) on a fresh
    estimate (Z + λ) / S2: E[P(Z + c S1 > q S2)] = 0.8. 400,000 seeded draws: sd 0.0006. The old
    factor q + t_0.8 falls short where df is small (66-76% at 3 units an arm, as the audit found)."""
    rng = np.random.default_rng(int(df * 10))
    n = 400_000
    s1, s2 = (np.sqrt(rng.chisquare(df, n) / df) for _ in range(2))
    z = rng.standard_normal(n)
    q = t_quantile_oracle(1 - (1 - confidence) / 2, df)
    c = float(welch.detect_factor(df, confidence))
    found = (np.abs(z + c * s1) > q * s2).mean()
    assert found == pytest.approx(0.8, abs=0.003), (df, c, found)
    old = q + t_quantile_oracle(0.8, df)
    assert old <= c
    if df <= 4:
        assert (np.abs(z + old * s1) > q * s2).mean() < 0.77
    # one-sided, with no critical value (a gate on the point change): E[Φ(c S1)] = 0.8
    cp = float(welch.detect_factor(df, None, two_sided=False))
    assert (z + cp * s1 > 0).mean() == pytest.approx(0.8, abs=0.003)
