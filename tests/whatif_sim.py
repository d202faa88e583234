"""Seeded what-if studies, vectorised: S studies of one design at once, with the noise real servers
show (a few % spread between servers, heavier tails than normal and now and then a slow server,
a spread that grows with the delay)."""
from __future__ import annotations

import numpy as np

from clef_prof.whatif.model import Observation

MEAN = 100.0          # the baseline's metric (req/s)


def design(sizes, levels_ms):
    """(x levels per server (n,), group per server (n,)) of servers per level `sizes`."""
    return np.repeat(np.asarray(levels_ms, float), sizes), np.repeat(np.arange(len(sizes)), sizes)


def studies(rng, S, sizes, levels_ms, pct_per_ms=-4.0, *, sd=0.03, het=2.0, tails=True, slow=0.05,
            bend_at=None, bend_pct_per_ms=0.0, additive=False):
    """(x, y, groups): x (S, n) added ms per request as measured (1% jitter around the level), y the
    metric; the truth is linear at `pct_per_ms` of MEAN (plus `bend_pct_per_ms` more past `bend_at`
    ms, a saturation); each server's noise is multiplicative with mean 1: sd at the baseline, growing
    to (1 + het) x sd at the top level, Student t(4) scaled to sd when `tails`, and a slow server
    (-10%) with probability `slow` (every level alike, so the slope in % is unchanged).
    `additive`: the noise in req/s does not scale with the truth (the spread at a large slope
    stays the one measured at 0, for power checks)."""
    lv, groups = design(sizes, levels_ms)
    n = len(lv)
    x = lv * (1 + 0.01 * rng.standard_normal((S, n)))
    s = sd * (1 + het * lv / max(lv.max(), 1e-12))
    eps = rng.standard_t(4, (S, n)) / np.sqrt(2) if tails else rng.standard_normal((S, n))
    truth = 1 + pct_per_ms / 100 * x
    if bend_at is not None:
        truth = truth + bend_pct_per_ms / 100 * np.maximum(x - bend_at, 0)
    y = MEAN * ((1 if additive else truth) * (1 + s * eps) - 1 + truth) if additive else MEAN * truth * (1 + s * eps)
    y = y * np.where(rng.random((S, n)) < slow, 0.9, 1.0)
    return x, y, groups


def observations(x_row, y_row, groups, levels_frac, stage="head", stage_ms=0.3) -> list[Observation]:
    """One study as the runner's observations: group 0 the shared baseline, the others `stage`."""
    return [Observation(None if g == 0 else stage, float(levels_frac[g]), "frac", i, float(x),
                        stage_ms, 1.0, 3, {"throughput_rps": float(y)})
            for i, (x, y, g) in enumerate(zip(x_row, y_row, groups))]
