"""analyse() against a by-hand figure: at two levels its slope is the difference of the levels'
means over their distance, its interval Welch's (HC3-inflated) over that distance."""
import numpy as np
from scipy import stats

from clef_prof.whatif.model import Observation
from clef_prof.whatif.render import render
from clef_prof.whatif.slopes import analyse


def _obs(rng, slope, per_level=4, levels=(0.0, 0.25), noise=0.02):
    out = []
    for i, lv in enumerate(levels):
        for k in range(per_level):
            x = lv * 2.0
            y = 100.0 * (1 + slope * x) * (1 + noise * rng.standard_normal())
            out.append(Observation(None if lv == 0 else "head", lv, "frac", i * per_level + k,
                                   x, 2.0, 1.0, 3, {"throughput_rps": y}))
    return out


def test_two_levels_is_welch_over_the_distance():
    obs = _obs(np.random.default_rng(1), -0.2)
    sl = analyse(obs).stages[0].slopes[0]
    y = np.array([o.metrics["throughput_rps"] for o in obs])
    a, b = y[:4], y[4:]
    assert np.isclose(sl.per_ms, (b.mean() - a.mean()) / 0.5)
    assert np.isclose(sl.per_ms, stats.linregress([o.added_ms_per_request for o in obs], y).slope)
    va, vb = a.var(ddof=1) / 4 * 4 / 3, b.var(ddof=1) / 4 * 4 / 3
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3)
    hw = stats.t.ppf(0.975, df) * np.sqrt(va + vb) / 0.5
    assert np.isclose(sl.hi - sl.lo, 2 * hw, rtol=1e-4)
    assert np.isclose(sl.pct_per_ms, 100 * sl.per_ms / a.mean())
    assert np.isclose(sl.pct_per_pct, sl.pct_per_ms / 100 * 2.0)
    assert sl.verdict == "critical" and sl.servers == 8 and sl.linear is None


def test_too_few_servers_and_render():
    obs = _obs(np.random.default_rng(2), -0.2, per_level=1, levels=(0.0, 0.1))
    r = analyse(obs)
    assert r.stages[0].slopes[0].verdict == "too few servers"
    assert '"verdict": "too few servers"' in render(r, "json")
    text = render(analyse(_obs(np.random.default_rng(3), -0.2)), "text")
    assert "critical" in text and max(map(len, text.splitlines())) <= 80


def test_servers_that_report_no_added_time_get_no_slope():
    """A stage never called (its delayed servers report +0 ms/request): no slope, said why."""
    obs = [Observation(o.stage, o.level, o.unit, o.slot, 0.0, 2.0, 1.0, 3, o.metrics)
           for o in _obs(np.random.default_rng(4), -0.2)]
    (sl,) = analyse(obs).stages[0].slopes
    assert sl.verdict == "too few servers" and "reported 0 ms/request" in sl.needed
    assert "too few servers" in render(analyse(obs), "text")
