"""Slopes of serving metrics against injected host time, servers as units (OLS, t interval)."""
from __future__ import annotations

import numpy as np

from clef_prof.compare.welch import t_quantile
from clef_prof.whatif.model import METRICS, Observation, Slope, StageResult, WhatIf


def _fit(x: np.ndarray, y: np.ndarray, confidence: float):
    n = len(x)
    xc = x - x.mean()
    sxx = float(xc @ xc)
    b = float(xc @ (y - y.mean())) / sxx
    resid = y - y.mean() - b * xc
    se = float(np.sqrt(resid @ resid / (n - 2) / sxx))
    t = float(t_quantile(0.5 + confidence / 2, n - 2))
    return b, b - t * se, b + t * se, t * se


def analyse(observations: list[Observation], *, confidence: float = 0.95) -> WhatIf:
    """Per stage × metric: the slope of the metric over added ms per request, with its interval."""
    ok = [o for o in observations if o.failed is None]
    base = [o for o in ok if o.stage is None]
    stages = sorted({o.stage for o in ok if o.stage is not None})
    out = []
    for stage in stages:
        obs = base + [o for o in ok if o.stage == stage]
        own = float(np.mean([o.stage_ms_per_request for o in obs]))
        slopes = []
        for m in METRICS:
            pts = [(o.added_ms_per_request, o.metrics[m]) for o in obs if m in o.metrics]
            bm = [o.metrics[m] for o in base if m in o.metrics]
            if not pts or not bm:
                continue
            x, y = np.array(pts, dtype=float).T
            levels = len({o.level for o in obs if m in o.metrics})
            b0 = float(np.mean(bm))
            if len(x) < 4 or levels < 2:
                slopes.append(Slope(stage, m, b0, float("nan"), float("nan"), float("nan"),
                                    float("nan"), float("nan"), float("nan"), None, len(x),
                                    levels, "too few servers", False,
                                    needed="at least 2 levels and 4 servers"))
                continue
            b, lo, hi, hw = _fit(x, y, confidence)
            hidden = lo <= 0 <= hi
            slopes.append(Slope(stage, m, b0, b, lo, hi, 100 * b / b0, 100 * lo / b0,
                                100 * hi / b0, b * own / b0 if own > 0 else None,
                                len(x), levels, "hidden" if hidden else "critical", hidden,
                                detectable_pct_per_ms=100 * 2 * hw / abs(b0)))
        out.append(StageResult(stage, own, tuple(slopes)))
    return WhatIf(confidence, tuple(out), len(base), len(observations) - len(ok))
