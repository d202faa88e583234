"""bench's verdict against a known truth, by a seeded simulation through bench's own functions
(benchmarks/verdict_calibration.py): at every design that gives a verdict (3, 4, 6, 8 servers per arm;
1 to 3 windows), with between-server spreads from 0 to 10% and 2.2% window noise, the A/A
false-positive rate is at most 5% within simulation error and not needlessly low, and the
interval covers a true +15% change. The two-level bootstrap it replaced called noise a change in
18% of A/A studies at 3 servers per arm and 10% at 6."""
from __future__ import annotations

import numpy as np
import pytest

from calibration import harness
from clef_prof.bench import stats as bs
from clef_prof.compare import welch

SIM = harness()
STUDIES = 2000      # a design; binomial sd of a 5% rate: 0.49%, so 6.5% is 3 sd above it


@pytest.fixture(scope="module")
def table():
    return SIM.bench_table(STUDIES, seed=20240521)


def test_false_positives_and_coverage_at_every_design(table):
    assert [(n, w) for n, w, _ in table] == [(n, w) for n in (3, 4, 6, 8) for w in (1, 2, 3)]
    for n, w, r in table:
        assert 0.025 <= r["false_positive"] <= 0.065, (n, w, r)
        assert 0.93 <= r["coverage"] <= 0.975, (n, w, r)


def test_false_positives_and_coverage_at_every_spread(table):
    """The same, pooled over the designs, at each between-server spread from 0 to 10%."""
    pooled = SIM.pooled_by_spread(table)
    assert sorted(pooled) == [0.0, 0.025, 0.05, 0.075, 0.10]
    for spread, (n, false, covered) in pooled.items():
        assert n == 12 * STUDIES // 5
        assert 0.025 <= false / n <= 0.065 and covered / n >= 0.93, (spread, n, false, covered)


def test_power_and_detectable_change_grow_with_servers(table):
    """More servers, more power: the stated smallest detectable change falls as it should (about
    1 / sqrt(n) once the t quantile settles), and +15% is found more often."""
    one_window = {n: r for n, w, r in table if w == 1}
    assert [one_window[n]["power"] for n in (3, 4, 6, 8)] == sorted(one_window[n]["power"] for n in (3, 4, 6, 8))
    assert one_window[8]["power"] > 0.85 and one_window[3]["power"] < 0.7
    assert one_window[3]["mdc_pct"] > one_window[4]["mdc_pct"] > one_window[6]["mdc_pct"] > one_window[8]["mdc_pct"]


def windows_of(num, den, arm: str, slots) -> list[dict]:
    """bench's window records (only the throughput columns and the run order) of one simulated arm:
    (servers, windows), server s at run-order slot slots[s]."""
    n_w = num.shape[1]
    return [{"arm": arm, "server": s + 1, "window": k + 1, "seq": int(slots[s]) * n_w + k + 1,
             "completions": float(num[s, k]), "elapsed_s": float(den[s, k])}
            for s in range(num.shape[0]) for k in range(n_w)]


@pytest.mark.parametrize("servers, windows", [(3, 2), (4, 1), (8, 3)])
def test_the_simulation_runs_benchs_own_path(servers, windows):
    """The vectorised simulation and `stats.changes` on the same windows give the same interval."""
    lo, hi, mdc, base, arm = SIM.bench_study(np.random.default_rng(servers), 6, servers, windows, 1.15, drift=0.01)
    sb, sa = SIM.abba_slots(servers)
    for i in range(6):
        ch = bs.changes({"main": windows_of(base[0][i], base[1][i], "main", sb),
                         "pr": windows_of(arm[0][i], arm[1][i], "pr", sa)}, "main", 0.95)
        (t,) = [c for c in ch if c["metric"] == "throughput_rps"]
        assert t["ci"] == pytest.approx([lo[i], hi[i]], rel=1e-9)
        assert t["mdc_pct"] == pytest.approx(mdc[i], rel=1e-9)
        assert t["servers"] == [servers, servers] and t["scale"] == "log" and t["interval"] == "run order"


@pytest.fixture(scope="module")
def drift():
    return SIM.drift_table(STUDIES, seed=20261208)


def test_drift_in_run_order_is_taken_out(drift):
    """ABBA with a drift of 1% per server slot (the audit's case) and without: the run-order
    interval keeps its false-positive rate and coverage at 3, 4 and 8 servers an arm, and under
    drift it finds +15% more often than Welch's, which counted the drift as spread between
    servers (at 8 servers, Welch's A/A false positives fall toward 0: an interval too wide)."""
    for n, d, row in drift:
        o, w_ = row["run order"], row["welch"]
        assert 0.025 <= o["false_positive"] <= 0.065 and 0.93 <= o["coverage"] <= 0.975, (n, d, o)
        if d:
            assert o["power"] > w_["power"] + 0.01, (n, o, w_)
            assert w_["false_positive"] < o["false_positive"], (n, o, w_)
        else:
            assert abs(o["power"] - w_["power"]) < 0.1, (n, o, w_)      # no drift: about the same power


def test_the_drift_check_by_hand():
    """Six servers, ABBA, values exactly on a line: 100 req/s for main, +10% for pr, and 2% more per
    slot; the fit returns the change and the drift exactly."""
    sb, sa = SIM.abba_slots(3)
    rate = {("main", s): 100.0 * 1.02 ** q for s, q in enumerate(sb)} | {("pr", s): 110.0 * 1.02 ** q
                                                                         for s, q in enumerate(sa)}
    ws = {a: [{"arm": a, "server": s + 1, "seq": int(q) + 1, "completions": rate[(a, s)] * 10.0, "elapsed_s": 10.0}
              for s, q in enumerate(slots)] for a, slots in (("main", sb), ("pr", sa))}
    (t,) = [c for c in bs.changes(ws, "main", 0.95) if c["metric"] == "throughput_rps"]
    assert t["ci"] == pytest.approx([10.0, 10.0], abs=1e-9)
    assert t["drift"]["pct_per_server"] == pytest.approx(2.0, abs=1e-9) and t["drift"]["beyond_noise"]
    assert t["interval"] == "run order" and t["df"] == 3.0        # 6 servers less the 3 fitted terms


def test_t_quantiles_against_tables():
    """Student t quantiles (two-sided 5% and 80% power) from published tables, and the normal."""
    got = welch.t_quantile(0.975, [1, 2, 4, 10, 30, np.inf])
    assert got == pytest.approx([12.7062, 4.3027, 2.7764, 2.2281, 2.0423, 1.9600], abs=1e-4)
    assert welch.t_quantile(0.8, [1, 5, 10]) == pytest.approx([1.3764, 0.9195, 0.8791], abs=1e-4)
    assert welch.t_quantile(0.995, [3]) == pytest.approx([5.8409], abs=1e-4)


@pytest.mark.parametrize("servers", [3, 4, 8])
def test_the_run_order_intervals_power_statement_holds(servers):
    """'detects ±X%' of the run-order interval: a fresh study whose true change is the X an A/A
    study printed finds it (lower end above 0) 78-82% of the time, at the 8.2% server spread."""
    rng = np.random.default_rng(servers)
    sp, (sb, sa) = np.full((4000, 1), 0.082), SIM.abba_slots(servers)

    def interval(factor):
        b, a = SIM.bench_arm(rng, 4000, servers, 1, 1.0, sp), SIM.bench_arm(rng, 4000, servers, 1, factor, sp)
        return welch.ordered_interval(bs.server_values(*b), bs.server_values(*a), sb, sa, 0.95)[0]

    stated = interval(1.0).mdc
    found = (interval(np.exp(stated)[:, None, None]).lo > 0).mean()
    assert 0.78 <= found <= 0.82, found
