"""compare's verdict between captures against a known truth, by a seeded simulation through
compare's own functions (benchmarks/verdict_calibration.py): 3, 4, 6, 8 captures per arm, capture-to-
capture spreads from 0 to 10% and batch noise that moves a capture's figure by about 2.2%. The
two-level bootstrap it replaced gave 16-51% false positives with 2% capture variation."""
from __future__ import annotations

import numpy as np
import pytest

from calibration import capture_data, harness
from clef_prof.compare.arm import Arms, CaptureRef
from clef_prof.compare.engine import compare
from clef_prof.base.config import StageConfig

SIM = harness()
STUDIES = 2000


def test_false_positives_and_coverage_at_every_design():
    table = SIM.compare_table(STUDIES, seed=7)
    assert [n for n, _ in table] == [3, 4, 6, 8]
    for n, r in table:
        assert 0.025 <= r["false_positive"] <= 0.065, (n, r)
        assert 0.93 <= r["coverage"] <= 0.975, (n, r)
    power = [r["power"] for _, r in table]
    assert power == sorted(power) and power[-1] > 0.85


def run(base, arm, i: int) -> dict:
    """One simulated study through `compare` itself: its captures as CaptureData."""
    data = {"main": [capture_data(f"main-{c}", base[1][i, c], base[0][i, c]) for c in range(base[0].shape[1])],
            "pr": [capture_data(f"pr-{c}", arm[1][i, c], arm[0][i, c]) for c in range(arm[0].shape[1])]}
    arms = Arms(["main", "pr"], {n: [CaptureRef(d.export, d.export) for d in ds] for n, ds in data.items()})
    out = compare(arms, data, StageConfig(stages=("head",)), n_boot=200, seed=i)
    return next(m for m in out["metrics"] if m["metric"] == "stages.head.host_ms_per_request")


@pytest.mark.parametrize("captures", [3, 6])
def test_the_simulation_runs_compares_own_path(captures):
    lo, hi, mdc, base, arm = SIM.compare_study(np.random.default_rng(captures), 4, captures, 1.15)
    for i in range(4):
        m = run(base, arm, i)
        assert m["ci_pct"] == pytest.approx([lo[i], hi[i]], rel=1e-6)      # ns rounded to integers in the capture
        assert m["mdc_pct"] == pytest.approx(mdc[i], rel=1e-5)
        assert m["verdict"] in ("beyond noise", "within noise")
        b = m["arms"]["main"]["mean"]
        assert m["ci"] == pytest.approx([b * lo[i] / 100, b * hi[i] / 100], rel=1e-6)


def test_two_captures_per_arm_give_no_verdict():
    """Below 3 captures an arm there is no verdict, whatever the change: even a +50% with a
    within-capture interval far from 0 is "too few captures to judge", and states no detectable change."""
    _, _, _, base, arm = SIM.compare_study(np.random.default_rng(1), 1, 2, 1.5)
    m = run(base, arm, 0)
    assert m["verdict"] == "too few captures to judge (2 in an arm; 3 needed)"
    assert m["ci"] is None and m["beyond_noise"] is False
    assert m["ci_within"][0] > 0 and m["mdc_pct"] is None and m["arms"]["pr"]["df"] > 0
