"""The history gate's false-alarm rate and power, by the seeded simulation behind docs/history.md
(benchmarks/history_calibration.py, through `trends.analyse` itself). Seeded: the same figures every
run; each is held to the documented figure within 3 binomial standard deviations of the two study
counts, and a false-alarm rate to its bound (the level) within 3 standard deviations."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("history_calibration", ROOT / "benchmarks" / "history_calibration.py")
SIM = importlib.util.module_from_spec(spec)
spec.loader.exec_module(SIM)


def within(measured: float, documented: float, n: int, n_doc: int) -> bool:
    p = min(max(documented, 1.0 / n_doc), 1 - 1.0 / n_doc)
    return abs(measured - documented) <= 3 * math.sqrt(p * (1 - p) * (1 / n + 1 / n_doc))


@pytest.mark.parametrize("n,kind,sd,level,documented", [
    (20, "normal", 0.082, 0.01, 0.003),
    (10, "normal", 0.022, 0.05, 0.020),
    (20, "t3", 0.082, 0.05, 0.010),
])
def test_false_alarms_per_series(n, kind, sd, level, documented):
    studies = 600
    rate = SIM.false_alarms(studies, n, kind, sd, level, seed=21)
    assert within(rate, documented, studies, 1000), rate
    assert rate <= level + 3 * math.sqrt(level * (1 - level) / studies), rate


def test_noise_carried_between_runs_raises_false_alarms():
    """AR(1) noise is not exchangeable: the documented rise (8.0% at 5%, 20 results) is there."""
    rate = SIM.false_alarms(300, 20, "ar1", 0.082, 0.05, seed=22)
    assert within(rate, 0.080, 300, 1000) and rate > 0.05, rate


def test_a_family_fires_at_most_k_times_the_level():
    studies = 200
    rate = SIM.family(studies, 20, 5, 0.082, 0.01, seed=23)
    assert within(rate, 0.020, studies, 500), rate
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / studies)


def test_power_and_the_interval_on_found_changes():
    studies = 80
    by, coverage, found = SIM.power(studies, 20, 5, 10, 0.022, 0.01, seed=24)
    assert by == sorted(by) and by[0] <= 0.05           # one result after the change is not enough
    assert within(by[-1], POWER_10_AT_2_2, studies, 250) and within(by[2], 0.88, studies, 250), by
    assert found >= studies // 2 and coverage >= 0.85, (coverage, found)


POWER_10_AT_2_2 = 1.0   # docs/history.md: +10% at 2.2% noise, found by the 5th result in 250 of 250
