"""Families of verdicts, by seeded simulation through `welch` and `compare.family` (and compare's
own path): K figures a study, correlated through the unit they share (a capture's or server's
level moves all of its figures), judged at 95% each. Were nothing changed, the chance that any
says beyond noise grows with K (the audit: 24-32% over compare's 13 noisy rows, 7.2% over bench's
5 metrics); the stated bound 1 - 0.95^K holds it from above, and Holm's correction holds it to 5%
(not needlessly below for independent figures); a real change still comes out."""
from __future__ import annotations

import numpy as np
import pytest

from calibration import capture_data, harness
from clef_prof.compare import welch
from clef_prof.compare.arm import Arms, CaptureRef
from clef_prof.compare.engine import compare
from clef_prof.compare.family import apply_family, family_gates
from clef_prof.base.config import StageConfig

STUDIES = 4000          # sd of a 5% rate: 0.34%


def figures(rng, units: int, k: int, rho: float, shift=None):
    """(studies, k, units) log figures: a unit level shared by its k figures (correlation rho) plus
    each figure's own noise, 5% sd in all; `shift` (k,) the true change of each figure."""
    shared = rng.standard_normal((STUDIES, 1, units))
    own = rng.standard_normal((STUDIES, k, units))
    shift = np.zeros(k) if shift is None else np.asarray(shift)
    return np.exp(0.05 * (np.sqrt(rho) * shared + np.sqrt(1 - rho) * own) + shift[:, None])


def p_values(rng, units, k, rho, shift=None):
    shift = np.zeros(k) if shift is None else shift
    w = welch.unit_interval(figures(rng, units, k, rho), figures(rng, units, k, rho, shift), 0.95)
    return welch.p_value(w.diff, w.se, w.df), w


@pytest.mark.parametrize("units, k, rho", [(3, 13, 0.3), (4, 13, 0.0), (6, 5, 0.8), (8, 20, 0.5), (3, 5, 0.0)])
def test_the_family_rate_is_stated_and_holm_holds_it(units, k, rho):
    rng = np.random.default_rng(units * 100 + k)
    p, w = p_values(rng, units, k, rho)
    alone = welch.beyond(w.lo, w.hi)
    assert np.array_equal(alone, p <= 0.05) or (alone != (p <= 0.05)).mean() < 1e-3   # the same test
    any_alone = alone.any(-1).mean()
    bound = welch.family_bound(k, 0.95)
    assert 0.05 * 1.5 < any_alone <= bound + 0.01, (any_alone, bound)
    any_holm = (welch.holm(p) <= 0.05).any(-1).mean()
    assert any_holm <= 0.056, any_holm
    if rho == 0.0:
        # independent: near the family's level (Welch's own rate at 3-4 units is a little below 5%)
        assert any_holm >= 0.02, any_holm


def test_holm_still_finds_a_real_change():
    """One figure of 13 moved by +15% at 8 units an arm: found by Holm most of the time, others not."""
    rng = np.random.default_rng(3)
    shift = np.zeros(13)
    shift[4] = np.log(1.15)
    p, _ = p_values(rng, 8, 13, 0.3, shift)
    adj = welch.holm(p)
    assert (adj[:, 4] <= 0.05).mean() > 0.9
    assert (adj[:, [i for i in range(13) if i != 4]] <= 0.05).any(-1).mean() <= 0.056


def test_holm_by_hand():
    assert welch.holm([0.01, 0.04, 0.03, np.nan, 0.5]) == pytest.approx([0.04, 0.09, 0.09, np.nan, 0.5],
                                                                         nan_ok=True)
    rows = [{"p": 0.01, "verdict": "beyond noise"}, {"p": 0.04, "verdict": "beyond noise"},
            {"p": 0.045, "verdict": "beyond noise"}, {"p": None}]
    f = apply_family(rows, "holm", 0.95)          # adjusted: 0.03, 0.08, 0.08
    assert f == {"method": "holm", "figures": 3, "any_beyond_if_none_changed_pct": pytest.approx(5.0)}
    assert [r.get("verdict") for r in rows] == ["beyond noise", "within noise", "within noise", None]
    assert [r.get("p_family") for r in rows] == [pytest.approx(0.03), pytest.approx(0.08), pytest.approx(0.08), None]
    assert apply_family([{"p": 0.2}] * 13, "none", 0.95)["any_beyond_if_none_changed_pct"] == \
        pytest.approx(100 * (1 - 0.95 ** 13))             # 48.7%


def test_gates_over_several_figures():
    """Gates at their thresholds (the true change exactly at each): each fires 2.5% of the time
    alone, any of 8 about 18%; by Holm (family_gates) any fires at most 2.5%."""
    rng = np.random.default_rng(9)
    k = 8
    p, w = p_values(rng, 6, k, 0.3, np.full(k, np.log(1.05)))
    thr = np.log(1.05)
    p_gate = welch.t_sf((w.diff - thr) / w.se, w.df)           # gate "> +5%": one-sided p
    fired = w.lo > thr
    assert (fired == (p_gate < 0.025)).mean() > 0.999
    assert 0.1 < fired.any(-1).mean()
    holm_fired = (welch.holm(p_gate) <= 0.025).any(-1).mean()
    assert holm_fired <= 0.03, holm_fired
    # family_gates on the first studies: the same firings as the vectorised Holm
    for i in range(40):
        vs = [{"basis": "ci", "p_gate": float(p_gate[i, j]), "fired": bool(fired[i, j])} for j in range(k)]
        vs.append({"basis": "exact", "fired": False})
        out = family_gates(vs, "holm", 0.95)
        assert [v["fired"] for v in out[:k]] == (welch.holm(p_gate[i]) <= 0.025).tolist()
        assert out[-1] == {"basis": "exact", "fired": False, "family": "none"}


def test_compare_applies_the_family_to_its_own_rows():
    """compare itself (two figures here: the batch and its one stage) with --family holm: its
    verdicts are Holm's over its p values, and it states the family."""
    sim = harness()
    _, _, _, base, arm = sim.compare_study(np.random.default_rng(2), 3, 4, 1.04)
    for i in range(3):
        data = {"main": [capture_data(f"main-{c}", base[1][i, c], base[0][i, c]) for c in range(4)],
                "pr": [capture_data(f"pr-{c}", arm[1][i, c], arm[0][i, c]) for c in range(4)]}
        arms = Arms(["main", "pr"], {n: [CaptureRef(d.export, d.export) for d in ds] for n, ds in data.items()})
        plain = compare(arms, data, StageConfig(stages=("head",)), n_boot=200, seed=i)
        fam = compare(arms, data, StageConfig(stages=("head",)), n_boot=200, seed=i, family="holm")
        ps = [m["arms"]["pr"]["p"] for m in plain["metrics"]]
        assert len(ps) == 2 and plain["family"]["pr"]["figures"] == 2
        assert plain["family"]["pr"]["any_beyond_if_none_changed_pct"] == pytest.approx(100 * (1 - 0.95 ** 2))
        adj = welch.holm(ps)
        assert [m["beyond_noise"] for m in fam["metrics"]] == (adj <= 0.05).tolist()
        assert [m["arms"]["pr"]["p_family"] for m in fam["metrics"]] == pytest.approx(adj.tolist())
        assert [m["beyond_noise"] for m in plain["metrics"]] == [p <= 0.05 for p in ps]
