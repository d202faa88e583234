""""detects ±X% (found 80% of the time)" is true: by a seeded simulation through bench's and
compare's own functions (benchmarks/verdict_calibration.py), each A/A study prints its detectable
change X; an independent study of the same design whose true change is +X is then judged; over the
studies, the share judged beyond noise is 80-82% (Satterthwaite df runs a little low: a little
conservative) within simulation error at every design that gives a
verdict. The factor it replaced (q + t_0.8 times the measured spread, the spread taken as known)
gave 66-76% at 3 units an arm (the audit's figure); tests/compare/test_welch.py contrasts the two
factors on their definition."""
from __future__ import annotations

import numpy as np
import pytest

from calibration import harness
from clef_prof.compare import welch

SIM = harness()
STUDIES = 4000      # sd of an 80% rate: 0.63%


def found_at_the_printed_change(study, n: int, rng) -> float:
    mdc = study(rng, STUDIES, n, 1.0)[2]
    lo1, hi1 = study(rng, STUDIES, n, (1.0 + mdc / 100.0)[:, None, None])[:2]
    return float(welch.beyond(lo1, hi1).mean())


def bench(rng, studies, n, factor):
    return SIM.bench_study(rng, studies, n, 1, factor)


def compare(rng, studies, n, factor):
    return SIM.compare_study(rng, studies, n, factor)


@pytest.mark.parametrize("study", [bench, compare], ids=["bench", "compare"])
@pytest.mark.parametrize("n", [3, 4, 6, 8])
def test_a_change_of_the_printed_size_is_found_80_percent_of_the_time(study, n):
    rng = np.random.default_rng(1000 + n)
    found = found_at_the_printed_change(study, n, rng)
    assert 0.785 <= found <= 0.835, (study.__name__, n, found)
