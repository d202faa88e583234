"""The what-if statistics' calibration table (docs/statistics.md, what-if): coverage of the slope
interval per design and noise, beside the pooled-variance OLS interval it replaced; the bend
test's false-bend rate; the predicted total's coverage. Seeded, 2,400 studies a cell:

    PYTHONPATH=. python3 benchmarks/whatif_calibration.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from whatif_sim import studies  # noqa: E402

from clef_prof.compare.welch import t_quantile  # noqa: E402
from clef_prof.whatif.fit import slope  # noqa: E402
from clef_prof.whatif.slopes import design_ok, linear_range  # noqa: E402

S = 2400
MS = (0.0, 0.03, 0.075, 0.15)
DESIGNS = [(2, 2), (3, 3), (2, 2, 2), (3, 2, 2, 2), (4, 3, 3), (6, 3), (6, 4), (4, 4, 4), (6, 6, 6, 6),
           (12, 12), (8, 8, 8), (6, 2), (4, 2, 2)]
NOISE = {"t4+slow, x3": dict(tails=True, het=2.0, slow=0.05), "normal, x3": dict(tails=False, het=2.0, slow=0.0),
         "normal, x1": dict(tails=False, het=0.0, slow=0.0)}


def ols(x, y, g, truth):
    n = x.shape[-1]
    xc = x - x.mean(-1, keepdims=True)
    sxx = (xc ** 2).sum(-1)
    b = (xc * (y - y.mean(-1, keepdims=True))).sum(-1) / sxx
    r = y - y.mean(-1, keepdims=True) - b[:, None] * xc
    hw = t_quantile(0.975, n - 2) * np.sqrt((r ** 2).sum(-1) / (n - 2) / sxx)
    b0 = y[:, g == 0].mean(-1)
    return np.mean(np.abs(100 * b / b0 - truth) <= 100 * hw / b0)


def main() -> None:
    print("| servers per level | allowed | " + " | ".join(f"{k}: level-wise / OLS" for k in NOISE)
          + " | false bends |")
    print("|---|---|" + "---|" * (len(NOISE) + 1))
    rng = np.random.default_rng(2026)
    for sizes in DESIGNS:
        cells = []
        for noise in NOISE.values():
            x, y, g = studies(rng, S, sizes, MS[:len(sizes)], -4.0, **noise)
            f = slope(x, y, g, 0.95)
            b0 = y[:, g == 0].mean(-1)
            cov = np.mean(np.abs(100 * f.est / b0 + 4.0) <= 100 * f.half / b0)
            cells.append(f"{cov:.3f} / {ols(x, y, g, -4.0):.3f}")
        bends = "—"
        if len(sizes) >= 3:
            x, y, g = studies(rng, S, sizes, MS[:len(sizes)], -4.0, **NOISE["t4+slow, x3"])
            bends = f"{np.mean(linear_range(x, y, g, 0.95) < len(sizes)):.3f}"
        print(f"| {' + '.join(map(str, sizes))} | {'yes' if design_ok(sizes) else 'too few'} | "
              + " | ".join(cells) + f" | {bends} |")


if __name__ == "__main__":
    main()
