"""Slopes of serving metrics against injected host time, servers as units.

The slope is the least-squares line over every server of a stage (the shared baseline servers at
0 and the stage's delayed ones); its interval gives each delay level its own spread (HC3,
Satterthwaite df: `fit`), because the spread grows with the delay and a pooled-variance OLS
interval then under-covers (0.86 at 6 + 3 + 3 servers, docs/statistics.md). With 3 or more levels
the response is tested for a bend (a level that departs from the line through the levels below
it, `linear_range`); the slope is fitted on the linear range only, whose top (`linear_max_ms`)
bounds every extrapolation."""
from __future__ import annotations

import numpy as np

from clef_prof.whatif.fit import departure, slope
from clef_prof.whatif.model import METRICS, Observation, Slope, StageResult, WhatIf

NEEDED = ("at least 4 servers over 2 or more levels, 2 at each level and 3 where another level has "
          "more than 1.5x as many")


def design_ok(sizes) -> bool:
    """The designs whose interval holds its coverage (tests/whatif/test_calibration.py): 4 servers
    or more over 2 levels or more, each level 2 servers or more, and 3 or more wherever another
    level has more than 1.5x as many (a level of 2 beside 6 under-covers: 0.93)."""
    sizes = np.asarray(sizes)
    if len(sizes) < 2 or sizes.sum() < 4 or sizes.min() < 2:
        return False
    return bool(sizes.min() >= 3 or sizes.max() <= 1.5 * sizes.min())


def linear_range(x: np.ndarray, y: np.ndarray, groups: np.ndarray, confidence: float) -> np.ndarray:
    """How many of the lowest levels the response is linear over, per study (x, y: (..., n)): the
    first level j >= 2 whose mean departs from the line through the levels below it ends the range
    at j; each of the G - 2 tests at (1 - confidence) / (G - 2) (Bonferroni), so a straight
    response is called bent at most 1 - confidence of the time. 2 levels: nothing to test."""
    groups = np.asarray(groups)
    sizes = np.bincount(groups)
    G = len(sizes)
    top = np.full(np.shape(y)[:-1], G)
    alpha = (1 - confidence) / max(G - 2, 1)
    for j in range(2, G):
        if not (design_ok(sizes[:j]) and sizes[j] >= 2):
            continue
        d = departure(x, y, groups, j, 1 - alpha)
        top = np.where((top == G) & (np.abs(d.est) > d.half), j, top)
    return top


def _too_few(stage, m, b0, n, levels) -> Slope:
    nan = float("nan")
    return Slope(stage, m, b0, nan, nan, nan, nan, nan, nan, None, n, levels, "too few servers",
                 False, needed=NEEDED)


def analyse(observations: list[Observation], *, confidence: float = 0.95) -> WhatIf:
    """Per stage × metric: the slope of the metric over added ms per request, with its interval,
    critical/hidden and the linear range."""
    ok = [o for o in observations if o.failed is None]
    base = [o for o in ok if o.stage is None]
    stages = sorted({o.stage for o in ok if o.stage is not None})
    out = []
    for stage in stages:
        obs = base + [o for o in ok if o.stage == stage]
        own = float(np.mean([o.stage_ms_per_request for o in obs]))
        slopes = []
        for m in METRICS:
            have = [o for o in obs if m in o.metrics]
            bm = [o.metrics[m] for o in base if m in o.metrics]
            if not have or not bm:
                continue
            b0 = float(np.mean(bm))
            x = np.array([o.added_ms_per_request for o in have], dtype=float)
            y = np.array([o.metrics[m] for o in have], dtype=float)
            levels, groups = np.unique([0.0 if o.stage is None else o.level for o in have],
                                       return_inverse=True)
            if not design_ok(np.bincount(groups)):
                slopes.append(_too_few(stage, m, b0, len(x), len(levels)))
                continue
            top = int(linear_range(x, y, groups, confidence))
            keep = groups < top
            f = slope(x[keep], y[keep], groups[keep], confidence)
            b, hw, mdc = float(f.est), float(f.half), float(f.mdc)
            hidden = abs(b) <= hw
            xmax = float(x[groups == top - 1].mean())
            bend = None
            if top < len(levels):
                bend = (f"bends past +{xmax:.3g} ms/request: level {levels[top]:g} "
                        f"(+{float(x[groups == top].mean()):.3g} ms/request) departs from the line")
            slopes.append(Slope(stage, m, b0, b, b - hw, b + hw, 100 * b / b0, 100 * (b - hw) / b0,
                                100 * (b + hw) / b0, b * own / b0 if own > 0 else None,
                                int(keep.sum()), top, "hidden" if hidden else "critical", hidden,
                                detectable_pct_per_ms=100 * mdc / abs(b0),
                                linear=None if len(levels) < 3 else top == len(levels), bend=bend,
                                linear_max_ms=xmax))
        out.append(StageResult(stage, own, tuple(slopes)))
    return WhatIf(confidence, tuple(out), len(base), len(observations) - len(ok))
