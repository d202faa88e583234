"""record's "profiler cost" carries its uncertainty: seeded simulations of the real code
(load.Load.summary over completions, session.profiler_cost) hold the intervals to their stated
95% coverage of the true change, at the spans record uses (a window of 1.5 s against 0.8 s
before it) and at a short one; the t quantile against known values."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from clef_prof.record.load import Completion, Load
from clef_prof.record.session import _t_quantile, profiler_cost

NS = 1_000_000_000


def _span(rng: random.Random, t0: int, seconds: float, rps: float, lat_ms: float) -> list[Completion]:
    """Poisson completions at `rps` over the span, latencies gamma-distributed with mean lat_ms."""
    out, t = [], t0
    while True:
        t += int(rng.expovariate(rps) * NS)
        if t > t0 + seconds * NS:
            return out
        out.append(Completion(done_ns=t, latency_ns=int(rng.gammavariate(4, lat_ms / 4) * 1e6), ok=True))


def _cost(rng, before_s, window_s, rps, change, lat_ms, lat_change):
    before = _span(rng, 0, before_s, rps, lat_ms)
    inside = _span(rng, int(before_s * NS), window_s, rps * (1 + change), lat_ms + lat_change)
    load = SimpleNamespace(done=before + inside, lags=[])      # the fields Load.summary reads
    a = Load.summary(load, 0, int(before_s * NS))
    b = Load.summary(load, int(before_s * NS), int((before_s + window_s) * NS))
    return profiler_cost({**a, "start_ns": 0, "end_ns": int(before_s * NS)}, b, "nsys")


@pytest.mark.parametrize("before_s, window_s, rps, change, lat_change", [
    (0.8, 1.5, 800.0, 0.0, 0.0), (0.8, 1.5, 800.0, -0.3, 2.0), (0.4, 0.5, 150.0, 0.5, -1.0)])
def test_intervals_cover_the_true_change_at_their_stated_rate(before_s, window_s, rps, change, lat_change):
    rng = random.Random(35)
    n, hit_t, hit_l = 1000, 0, 0
    for _ in range(n):
        c = _cost(rng, before_s, window_s, rps, change, 10.0, lat_change)
        lo, hi = c["throughput_change_pct_ci"]
        hit_t += lo <= 100 * change <= hi
        lo, hi = c["latency_ms_mean_change_ci"]
        hit_l += lo <= lat_change <= hi
        assert c["confidence"] == 0.95
    # 95% stated; 1000 runs: a binomial sd of 0.7 points
    assert 0.93 <= hit_t / n <= 0.975, hit_t / n
    assert 0.93 <= hit_l / n <= 0.975, hit_l / n


def test_a_span_of_under_four_bins_has_no_interval():
    """3 bins a side covered 92.5% at 95% stated (this simulation at 0.3 s before): no interval."""
    rng = random.Random(1)
    c = _cost(rng, 0.3, 1.0, 400.0, 0.0, 10.0, 0.0)
    assert c["throughput_change_pct_ci"] is None and c["latency_ms_mean_change_ci"] is None
    c = _cost(rng, 0.4, 1.0, 400.0, 0.0, 10.0, 0.0)
    assert c["throughput_change_pct_ci"] is not None and c["latency_ms_mean_change_ci"] is not None
    before = {"throughput_rps": 100.0, "latency_ms_mean": 5.0, "start_ns": 0, "end_ns": NS,
              "bins_throughput_rps": [100.0], "bins_latency_ms_mean": [5.0]}
    c = profiler_cost(before, {**before, "throughput_rps": 90.0}, "nsys")
    assert c["throughput_change_pct"] == pytest.approx(-10.0)
    assert c["throughput_change_pct_ci"] is None and c["latency_ms_mean_change_ci"] is None


@pytest.mark.parametrize("df, want", [(1, 12.706204736174704), (2, 4.302652729749462), (5, 2.570581835636314),
                                      (30, 2.042272456301238), (1e6, 1.959966)])
def test_t_quantile(df, want):
    assert _t_quantile(0.975, df) == pytest.approx(want, rel=1e-6)
    assert math.isfinite(_t_quantile(0.975, 0.7))
