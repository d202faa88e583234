"""Calibration of bench's and compare's verdicts by simulation, through the tool's own functions.

    python benchmarks/verdict_calibration.py [--studies 4000] [--seed 0]

A study is one A/B run of a design (units per arm; windows per server for bench). Every unit
(a fresh server, a capture) gets its own level, drawn around the arm's true figure with a
between-unit spread (sd of the log figure: 0 to 10%, from the 8.2% measured between fresh vLLM
servers on an H200); its windows (bench) or batches (compare) add within-unit noise (2.2% per
30 s window measured on the same machine). The figures then go through bench's
`stats.server_values` (Σ completions / Σ elapsed s per server) or compare's
`engine.capture_values` (Σ ns / Σ requests per capture), and `welch.unit_interval`, as `bench`
and `compare` compute them (tests/test_verdict_calibration.py checks that `stats.changes` and
`engine.compare` give the same intervals on sampled studies).

Printed per design: the A/A false-positive rate (an interval that excludes 0 when nothing
changed), the coverage of a true +15% change, the power to call +15% beyond noise, and the median
smallest detectable change (80% power) that the verdicts state. The test asserts the first two;
the table in docs/statistics.md is this script's output.
"""
from __future__ import annotations

import argparse

import numpy as np

from clef_prof.bench import stats as bs
from clef_prof.compare import welch
from clef_prof.compare.engine import capture_values

WINDOW_NOISE = 0.022                # sd of one 30 s window's log throughput around its server's level
SPREADS = (0.0, 0.025, 0.05, 0.075, 0.10)  # between-unit sd of the log figure, cycled over the studies
CHANGE = 0.15                       # the true change whose coverage and power are measured
BENCH_DESIGNS = [(n, w) for n in (3, 4, 6, 8) for w in (1, 2, 3)]
COMPARE_DESIGNS = (3, 4, 6, 8)
BATCHES = 40                        # batch instances per simulated capture


def _spreads(studies: int) -> np.ndarray:
    return np.resize(np.asarray(SPREADS), studies)[:, None]


def abba_slots(servers: int) -> tuple[np.ndarray, np.ndarray]:
    """The run-order slots of the baseline's and the arm's servers under bench's ABBA schedule."""
    r = np.arange(servers)
    return 2 * r + r % 2, 2 * r + 1 - r % 2


def bench_arm(rng, studies: int, servers: int, windows: int, factor: float, spread=None, drift: float = 0.0,
              slot=None):
    """(completions, elapsed s) per window, shape (studies, servers, windows): a closed loop at
    about 200 req/s whose windows drain for a varying time after their 30 s; `drift`: the change
    of the log rate per server slot of the run order (`slot`: each server's)."""
    spread = _spreads(studies) if spread is None else spread
    level = rng.normal(0.0, 1.0, (studies, servers)) * spread
    if drift:
        level = level + drift * np.asarray(slot, dtype=np.float64)
    rate = 200.0 * factor * np.exp(level[..., None] + rng.normal(0.0, WINDOW_NOISE, (studies, servers, windows)))
    elapsed = 30.0 + rng.uniform(0.0, 0.5, (studies, servers, windows))
    return rate * elapsed, elapsed


def bench_study(rng, studies: int, servers: int, windows: int, factor: float, confidence: float = 0.95,
                drift: float = 0.0, welch_only: bool = False):
    """bench's interval (in %) for `studies` simulated A/B runs in ABBA order, and the arms'
    windows: servers in run order (`welch.ordered_interval`, as bench on windows that carry their
    seq), or Welch's interval (`welch_only`: what bench gave before, and gives without a run order)."""
    spread = _spreads(studies)
    sb, sa = abba_slots(servers)
    base = bench_arm(rng, studies, servers, windows, 1.0, spread, drift, sb)
    arm = bench_arm(rng, studies, servers, windows, factor, spread, drift, sa)
    vb, va = bs.server_values(*base), bs.server_values(*arm)
    w = welch.unit_interval(vb, va, confidence) if welch_only else welch.ordered_interval(vb, va, sb, sa, confidence)[0]
    lo, hi, mdc = w.pct(1.0)
    return lo, hi, mdc, base, arm


def drift_table(studies: int, seed: int, drift: float = 0.01) -> list[tuple]:
    """At 1% drift per server slot (and none), per servers an arm (1 window): A/A false positives,
    coverage and power at +CHANGE of the run-order interval and of Welch's."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (3, 4, 8):
        for d in (0.0, drift):
            row = {}
            for name, only in (("run order", False), ("welch", True)):
                aa = bench_study(rng, studies, n, 1, 1.0, drift=d, welch_only=only)
                shifted = bench_study(rng, studies, n, 1, 1.0 + CHANGE, drift=d, welch_only=only)
                row[name] = summary(aa, shifted)
            out.append((n, d, row))
    return out


def compare_arm(rng, studies: int, captures: int, factor: float, spread=None):
    """(host ns, requests) per batch, shape (studies, captures, BATCHES): batches of 1..16
    requests at 1 ms a request, with batch noise that makes a capture's figure vary by about
    WINDOW_NOISE around its level."""
    spread = _spreads(studies) if spread is None else spread
    level = rng.normal(0.0, 1.0, (studies, captures)) * spread
    size = rng.integers(1, 17, (studies, captures, BATCHES)).astype(np.float64)
    per_batch = WINDOW_NOISE * np.sqrt(BATCHES)           # the capture's figure averages BATCHES of them
    ns = size * 1e6 * factor * np.exp(level[..., None] + rng.normal(0.0, per_batch, size.shape))
    return ns, size


def compare_study(rng, studies: int, captures: int, factor: float, confidence: float = 0.95):
    spread = _spreads(studies)
    base = compare_arm(rng, studies, captures, 1.0, spread)
    arm = compare_arm(rng, studies, captures, factor, spread)
    w = welch.unit_interval(capture_values(*base, 1e-6), capture_values(*arm, 1e-6), confidence)
    lo, hi, mdc = w.pct(1.0)
    return lo, hi, mdc, base, arm


def summary(aa, shifted) -> dict:
    """A/A false positives, coverage and power at +CHANGE, median smallest detectable change."""
    lo0, hi0, mdc0 = aa[:3]
    lo1, hi1 = shifted[:2]
    true = 100.0 * CHANGE
    false, covered = welch.beyond(lo0, hi0), (lo1 <= true) & (true <= hi1)
    spread = _spreads(len(lo0))[:, 0]
    return {"false_positive": float(false.mean()),
            "coverage": float(covered.mean()),
            "power": float((lo1 > 0).mean()),
            "mdc_pct": float(np.median(mdc0)),
            # per between-unit spread: (studies, false positives, covered), to pool over designs
            "by_spread": {float(s): (int((spread == s).sum()), int(false[spread == s].sum()),
                                     int(covered[spread == s].sum())) for s in SPREADS}}


def bench_table(studies: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [(n, w, summary(bench_study(rng, studies, n, w, 1.0), bench_study(rng, studies, n, w, 1.0 + CHANGE)))
            for n, w in BENCH_DESIGNS]


def compare_table(studies: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [(n, summary(compare_study(rng, studies, n, 1.0), compare_study(rng, studies, n, 1.0 + CHANGE)))
            for n in COMPARE_DESIGNS]


def pooled_by_spread(table) -> dict:
    """{spread: (studies, false positives, covered)} summed over the designs of a table."""
    out = {}
    for row in table:
        for sp, counts in row[-1]["by_spread"].items():
            out[sp] = tuple(a + b for a, b in zip(out.get(sp, (0, 0, 0)), counts))
    return out


def power_at(spread: float, studies: int, seed: int) -> list[tuple]:
    """Power at +CHANGE and the median detectable change at one between-server spread (the
    measured 8.2%): the figures behind bench's defaults."""
    rng = np.random.default_rng(seed)
    out = []
    for n, w in [(2, 2), (3, 1), (4, 1), (6, 1), (8, 1), (4, 2), (6, 2)]:
        if n < welch.MIN_UNITS:
            out.append((n, w, None))
            continue
        sp = np.full((studies, 1), spread)
        base = bench_arm(rng, studies, n, w, 1.0, sp)
        arm = bench_arm(rng, studies, n, w, 1.0 + CHANGE, sp)
        sb, sa = abba_slots(n)
        iv = welch.ordered_interval(bs.server_values(*base), bs.server_values(*arm), sb, sa, 0.95)[0]
        lo, hi, mdc = iv.pct(1.0)
        out.append((n, w, {"power": float((lo > 0).mean()), "mdc_pct": float(np.median(mdc))}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--studies", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(f"bench: {a.studies} studies a design, between-server spread cycled over "
          f"{', '.join(f'{100 * s:g}%' for s in SPREADS)}, window noise {100 * WINDOW_NOISE:g}%")
    print("| servers per arm | windows | A/A false positives | coverage of +15% | power at +15% | median detectable |")
    print("|---:|---:|---:|---:|---:|---:|")
    table = bench_table(a.studies, a.seed)
    for n, w, r in table:
        print(f"| {n} | {w} | {100 * r['false_positive']:.1f}% | {100 * r['coverage']:.1f}% | "
              f"{100 * r['power']:.0f}% | ±{r['mdc_pct']:.1f}% |")
    print("\nbench, all designs pooled, per between-server spread:")
    print("| spread | A/A false positives | coverage of +15% |")
    print("|---:|---:|---:|")
    for sp, (n, fp, cov) in pooled_by_spread(table).items():
        print(f"| {100 * sp:g}% | {100 * fp / n:.1f}% | {100 * cov / n:.1f}% |")
    print(f"\ncompare: {a.studies} studies a design, {BATCHES} batches a capture")
    print("| captures per arm | A/A false positives | coverage of +15% | power at +15% | median detectable |")
    print("|---:|---:|---:|---:|---:|")
    for n, r in compare_table(a.studies, a.seed + 1):
        print(f"| {n} | {100 * r['false_positive']:.1f}% | {100 * r['coverage']:.1f}% | {100 * r['power']:.0f}% | "
              f"±{r['mdc_pct']:.1f}% |")
    print("\nbench under drift (1 window a server; ABBA): run-order interval vs Welch's")
    print("| servers per arm | drift per server | false positives | coverage of +15% | power at +15% | Welch: false positives | coverage | power |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, d, row in drift_table(a.studies, a.seed + 3):
        o, w_ = row["run order"], row["welch"]
        print(f"| {n} | {100 * d:g}% | {100 * o['false_positive']:.1f}% | {100 * o['coverage']:.1f}% | "
              f"{100 * o['power']:.0f}% | {100 * w_['false_positive']:.1f}% | {100 * w_['coverage']:.1f}% | "
              f"{100 * w_['power']:.0f}% |")
    print("\nbench at the measured 8.2% spread between servers:")
    print("| servers per arm | windows | power at +15% | median detectable |")
    print("|---:|---:|---:|---:|")
    for n, w, r in power_at(0.082, a.studies, a.seed + 2):
        print(f"| {n} | {w} | " + ("no verdict | — |" if r is None else
                                   f"{100 * r['power']:.0f}% | ±{r['mdc_pct']:.1f}% |"))


if __name__ == "__main__":
    main()
