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

from clef_prof.whatif.fit import departure, detectable, slope
import dataclasses

from clef_prof.whatif.model import METRICS, Implied, Observation, Slope, StageResult, WhatIf

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


def implied(sl: Slope, stage_ms: float, speedup_pct: float) -> Implied:
    """The metric's change for `speedup_pct` % less of the stage's host time per request, from the
    slope: refused where the slope has no verdict or the cut is larger than the measured linear
    range (the line is known over [0, linear_max_ms] only, so it is extrapolated no farther below 0)."""
    delta = -speedup_pct / 100 * stage_ms
    refuse = None
    if sl.verdict == "too few servers":
        refuse = "too few servers for a slope"
    elif not 0 < speedup_pct <= 100:
        refuse = f"a speed-up of {speedup_pct:g}% is not between 0 and 100%"
    elif sl.linear_max_ms is None or -delta > sl.linear_max_ms:
        refuse = (f"{delta:+.3g} ms/request is beyond the measured linear range "
                  f"(+{sl.linear_max_ms or 0:.3g} ms/request): not extrapolated")
    if refuse:
        return Implied(sl.stage, sl.metric, speedup_pct, delta, None, None, None, refuse)
    lo, hi = sorted((sl.pct_lo * delta, sl.pct_hi * delta))
    return Implied(sl.stage, sl.metric, speedup_pct, delta, sl.pct_per_ms * delta, lo, hi)


def stage_arrays(observations: list[Observation], stage: str, metric: str):
    """(x, y, groups, levels) of one stage and metric over the baseline servers (first, x = 0) and
    the stage's; None when either is missing."""
    ok = [o for o in observations if o.failed is None and metric in o.metrics]
    base = [o for o in ok if o.stage is None]
    have = base + [o for o in ok if o.stage == stage]
    if not base or len(have) == len(base):
        return None
    x = np.array([o.added_ms_per_request for o in have], dtype=float)
    y = np.array([o.metrics[metric] for o in have], dtype=float)
    levels, groups = np.unique([0.0 if o.stage is None else o.level for o in have], return_inverse=True)
    return x, y, groups, levels


def analyse(observations: list[Observation], *, confidence: float = 0.95,
            speedup_pct: float | None = 20.0) -> WhatIf:
    """Per stage × metric: the slope of the metric over added ms per request, with its interval,
    critical/hidden, the linear range and the implied effect of `speedup_pct` % less stage time."""
    ok = [o for o in observations if o.failed is None]
    base = [o for o in ok if o.stage is None]
    stages = sorted({o.stage for o in ok if o.stage is not None})
    out = []
    for stage in stages:
        # the stage's own host time per request (without the injected part), on its servers
        own = float(np.mean([o.stage_ms_per_request for o in ok if o.stage == stage]))
        slopes = []
        for m in METRICS:
            arrays = stage_arrays(observations, stage, m)
            if arrays is None:
                continue
            x, y, groups, levels = arrays
            b0 = float(y[groups == 0].mean())
            if not design_ok(np.bincount(groups)):
                slopes.append(_too_few(stage, m, b0, len(x), len(levels)))
                continue
            if not np.all(np.isfinite(y)) or np.ptp(x) <= 0:
                slopes.append(dataclasses.replace(_too_few(stage, m, b0, len(x), len(levels)),
                                                  needed="delayed servers that report the time added to "
                                                         "them (every one reported 0 ms/request)"))
                continue
            top = int(linear_range(x, y, groups, confidence))
            keep = groups < top
            f = slope(x[keep], y[keep], groups[keep], confidence)
            b, hw = float(f.est), float(f.half)
            mdc = detectable(float(f.se), float(f.df), confidence)
            hidden = abs(b) <= hw
            xk = x[keep]
            weight = float(-xk.mean() / ((xk - xk.mean()) ** 2).sum())
            xmax = float(x[groups == top - 1].mean())
            bend = None
            if top < len(levels):
                bend = (f"bends past +{xmax:.3g} ms/request: level {levels[top]:g} "
                        f"(+{float(x[groups == top].mean()):.3g} ms/request) departs from the line")
            sl = Slope(stage, m, b0, b, b - hw, b + hw, 100 * b / b0, 100 * (b - hw) / b0,
                       100 * (b + hw) / b0, b * own / b0 if own > 0 else None,
                       int(keep.sum()), top, "hidden" if hidden else "critical", hidden,
                       detectable_pct_per_ms=100 * mdc / abs(b0),
                       linear=None if len(levels) < 3 else top == len(levels), bend=bend,
                       linear_max_ms=xmax, se=float(f.se), df=float(f.df), base_weight=weight)
            if speedup_pct is not None:
                sl = dataclasses.replace(sl, implied=implied(sl, own, speedup_pct))
            slopes.append(sl)
        out.append(StageResult(stage, own, tuple(slopes)))
    return WhatIf(confidence, tuple(out), len(base), len(observations) - len(ok), speedup_pct=speedup_pct)
