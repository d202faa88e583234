"""analyse() against a numpy OLS fit, and its coverage on a seeded linear truth."""
import numpy as np
from scipy import stats

from clef_prof.whatif.model import Observation
from clef_prof.whatif.render import render
from clef_prof.whatif.slopes import analyse


def _obs(rng, slope, per_level=4, levels=(0.0, 0.1, 0.25), noise=0.02):
    out = []
    for i, lv in enumerate(levels):
        for k in range(per_level):
            x = lv * 2.0
            y = 100.0 * (1 + slope * x) * (1 + noise * rng.standard_normal())
            out.append(Observation(None if lv == 0 else "head", lv, "frac", i * per_level + k,
                                   x, 2.0, 1.0, 3, {"throughput_rps": y}))
    return out


def test_slope_matches_numpy_ols():
    obs = _obs(np.random.default_rng(1), -0.2)
    sl = analyse(obs).stages[0].slopes[0]
    x = np.array([o.added_ms_per_request for o in obs])
    y = np.array([o.metrics["throughput_rps"] for o in obs])
    fit = stats.linregress(x, y)
    hw = stats.t.ppf(0.975, len(x) - 2) * fit.stderr
    assert np.isclose(sl.per_ms, fit.slope) and np.isclose(sl.hi - sl.lo, 2 * hw)
    assert sl.verdict == "critical" and sl.servers == 12


def test_coverage_linear_truth():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        sl = analyse(_obs(rng, -0.2)).stages[0].slopes[0]
        hits += sl.lo <= -20.0 <= sl.hi
    assert hits / 400 >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / 400)


def test_too_few_servers_and_render():
    obs = _obs(np.random.default_rng(2), -0.2, per_level=1, levels=(0.0, 0.1))
    r = analyse(obs)
    assert r.stages[0].slopes[0].verdict == "too few servers"
    assert '"verdict": "too few servers"' in render(r, "json")
    text = render(analyse(_obs(np.random.default_rng(3), -0.2)), "text")
    assert "critical" in text and max(map(len, text.splitlines())) <= 80
