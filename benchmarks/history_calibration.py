"""The history gate's false-alarm rate and power, by seeded simulation through its own code.

Each study is one series of results of one metric (a host time per request), each result the
figure of one capture or server: its true level times exp(noise). It goes through
clef_prof.history.trends itself (rows as the store gives them, `analyse`, the gate), so the figures
in docs/history.md are those of the shipped code.

- false alarms: a series of `n` results without change; the gate judged once, on its newest
  result (one result per commit). Noise: log-normal at the spreads the project measured (2.2%
  between captures' batch noise, 8.2% between fresh servers on an H200: docs/statistics.md),
  Student's t with 3 degrees of freedom (a slow runner now and then), and AR(1) with rho = 0.5
  (the machine's state carried from run to run: not exchangeable, so the permutation test's
  level no longer holds).
- a family of k independent series: the share of studies in which any fires.
- power: `before` results, then a regression of +x% from result `before + 1` on; the gate judged
  at every new result, and the share of studies in which it has fired by the j-th result after
  the change (it fires once: a change point already found is no longer new).
- the change's interval: of the studies whose change point the gate found within one result of
  the truth, the share whose interval holds the true change.

    python benchmarks/history_calibration.py [--studies 1000] [--seed 1]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clef_prof.history import trends  # noqa: E402
from clef_prof.history.store import Row  # noqa: E402

METRIC = "stages.head.host_ms_per_request"


def rows(values, commits=None) -> list[Row]:
    """One series as the store reads it: one result per value, each its own commit."""
    return [Row(i + 1, f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00", i, commits[i] if commits else f"c{i + 1}",
                "main", "sim", "analyze", "", METRIC, "ms/request", float(v), False) for i, v in enumerate(values)]


def noise(rng, kind: str, size, sd: float) -> np.ndarray:
    """Log-scale noise of standard deviation `sd`: normal, t(3) scaled to that sd, or AR(1) rho 0.5."""
    if kind == "normal":
        return rng.normal(0, sd, size)
    if kind == "t3":
        return rng.standard_t(3, size) * sd / np.sqrt(3.0)
    if kind == "ar1":                   # stationary: every result's sd is `sd`
        out = rng.normal(0, sd, size)
        e = out * np.sqrt(1 - 0.25)
        for i in range(1, size[-1]):
            out[..., i] = 0.5 * out[..., i - 1] + e[..., i]
        return out
    raise ValueError(kind)


def fires(values, sig_level: float, seed: int) -> trends.Gate:
    """The gate on one series through `analyse`, as `clef-prof history --fail-if-new-change` runs it."""
    h = trends.analyse("sim", rows(values), len(values), last=0, sig_level=sig_level, seed=seed,
                       gate_metrics=[METRIC])
    return h.gate


def false_alarms(studies: int, n: int, kind: str, sd: float, sig_level: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    z = 0.1 * np.exp(noise(rng, kind, (studies, n), sd))
    return float(np.mean([fires(z[i], sig_level, seed + i).fired for i in range(studies)]))


def family(studies: int, n: int, k: int, sd: float, sig_level: float, seed: int) -> float:
    """The share of studies in which any of k independent series fires."""
    rng = np.random.default_rng(seed)
    z = 0.1 * np.exp(noise(rng, "normal", (studies, k, n), sd))
    return float(np.mean([any(fires(z[i, j], sig_level, seed + i * k + j).fired for j in range(k))
                          for i in range(studies)]))


def power(studies: int, before: int, after: int, shift_pct: float, sd: float, sig_level: float, seed: int):
    """(share fired by the j-th result after the change, j = 1..after; coverage of the interval
    among changes found within one result of the truth; how many such)."""
    rng = np.random.default_rng(seed)
    n = before + after
    z = 0.1 * np.exp(noise(rng, "normal", (studies, n), sd))
    z[:, before:] *= 1 + shift_pct / 100
    first = np.full(studies, np.inf)
    covered = found = 0
    for i in range(studies):
        for j in range(1, after + 1):
            g = fires(z[i, :before + j], sig_level, seed + i)
            line = g.lines[0]
            if line.fired:
                first[i] = j
                c = line.change
                if abs(c.index - before) <= 1 and c.ci_pct is not None:
                    found += 1
                    covered += c.ci_pct[0] <= shift_pct <= c.ci_pct[1]
                break
    by = [float(np.mean(first <= j)) for j in range(1, after + 1)]
    return by, (covered / found if found else None), found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="alarms,family,power", help="which tables (comma-separated)")
    a = ap.parse_args(argv)
    parts = set(a.only.split(","))
    t0 = time.perf_counter()
    if "alarms" in parts:
        alarms(a)
    if "family" in parts:
        print("\nfamily of k independent series (20 results each, 8.2% noise, level 1%)")
        for k in (1, 5, 10):
            print(f"| {k} | {100 * family(a.studies // 2, 20, k, 0.082, 0.01, a.seed):.1f}% |", flush=True)
    if "power" in parts:
        table_power(a)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


def alarms(a) -> None:
    print("false alarms per series, gate judged on the newest result (one result per commit)")
    print("| results | noise | level 5% | level 1% |\n|---:|---|---:|---:|")
    for n in (10, 20, 50):
        for kind, sd in (("normal", 0.022), ("normal", 0.082), ("t3", 0.082), ("ar1", 0.082))[:4 if n < 50 else 3]:
            r = [false_alarms(a.studies, n, kind, sd, lv, a.seed) for lv in (0.05, 0.01)]
            print(f"| {n} | {kind} {100 * sd:.1f}% | {100 * r[0]:.1f}% | {100 * r[1]:.1f}% |", flush=True)


def table_power(a) -> None:
    print("\npower: 20 results, then +x%; share fired by the j-th result after the change (level 1%)")
    print("| noise | change | j=1 | j=2 | j=3 | j=4 | j=5 | interval coverage |")
    for sd in (0.022, 0.082):
        for shift in ((5, 10, 20) if sd < 0.05 else (10, 20, 40)):
            by, cov, found = power(a.studies // 4, 20, 5, shift, sd, 0.01, a.seed)
            cells = " | ".join(f"{100 * b:.0f}%" for b in by)
            print(f"| {100 * sd:.1f}% | +{shift}% | {cells} | "
                  f"{'-' if cov is None else f'{100 * cov:.0f}% of {found}'} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
