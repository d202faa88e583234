"""Predicted vs measured: the serving change a compare's stage changes imply through the slopes
measured on main, beside bench's measured change.

Each stage's term is slope (% of the metric per +1 ms/request) x the stage's change (ms per
request, PR - main, from compare); the total is their sum. The interval propagates both: the
delta-method variance b'V_d b + d'V_b d, with V_d the stages' Welch covariance between the arms'
captures (one capture moves every stage) and V_b the slopes' (they share the baseline servers),
on Satterthwaite's df of the two parts. A stage change outside the measured linear range is not
predicted (the line is not known there). Unexplained = measured - predicted, their intervals
combined as independent (bench's servers are not the what-if's)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clef_prof.compare.welch import MIN_UNITS, t_quantile
from clef_prof.base.errors import ClefError
from clef_prof.whatif.model import Observation, WhatIf
from clef_prof.whatif.slopes import stage_arrays

# the what-if's metric -> bench's
BENCH_METRIC = {"throughput_rps": "throughput_rps", "p50_ms": "latency_ms_p50", "p99_ms": "latency_ms_p99"}


class PredictError(ClefError):
    """Inputs that cannot be joined (one line, EXIT_INPUT)."""


@dataclass(frozen=True)
class Term:
    """One stage's predicted change of one metric, in % of main's figure."""
    stage: str
    change_ms: float
    slope_pct_per_ms: float | None
    pct: float | None
    lo: float | None
    hi: float | None
    refused: str | None = None


@dataclass(frozen=True)
class Measured:
    pct: float
    lo: float | None
    hi: float | None
    verdict: str


@dataclass(frozen=True)
class MetricPrediction:
    """Per metric: the stages' terms, their total and, given a bench, the measured change and the
    part the stages leave unexplained (all in % of main's figure)."""
    metric: str
    terms: tuple[Term, ...]
    pct: float | None
    lo: float | None
    hi: float | None
    refused: str | None = None
    measured: Measured | None = None
    unexplained: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Prediction:
    confidence: float
    baseline: str
    arm: str
    stages: tuple[str, ...]
    metrics: tuple[MetricPrediction, ...]
    notes: tuple[str, ...] = ()


def combine(b, Vb, dfb, d, Vd, dfd, confidence: float):
    """(total, half width, df) of Σ b_s d_s over the last axis, b and d independent estimates with
    covariances Vb, Vd (..., K, K) and per-stage df (..., K); vectorised over leading axes."""
    b, d = np.asarray(b, float), np.asarray(d, float)
    var_d = np.einsum("...i,...ij,...j->...", b, Vd, b)
    var_b = np.einsum("...i,...ij,...j->...", d, Vb, d)
    # each part's df: Satterthwaite over the stages' shares of it
    share_d = b ** 2 * np.einsum("...ii->...i", Vd)
    share_b = d ** 2 * np.einsum("...ii->...i", Vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        df_d = np.where(share_d.sum(-1) > 0, share_d.sum(-1) ** 2 / (share_d ** 2 / dfd).sum(-1), np.inf)
        df_b = np.where(share_b.sum(-1) > 0, share_b.sum(-1) ** 2 / (share_b ** 2 / dfb).sum(-1), np.inf)
        var = var_d + var_b
        df = np.where(var > 0, var ** 2 / (np.where(var_d > 0, var_d ** 2 / df_d, 0)
                                           + np.where(var_b > 0, var_b ** 2 / df_b, 0)), np.inf)
    df = np.maximum(np.nan_to_num(df, nan=np.inf), 1.0)
    q = t_quantile(0.5 + confidence / 2, df)
    return (b * d).sum(-1), q * np.sqrt(var), df


def stage_changes(compare: dict, stages: tuple[str, ...], arm: str, source: str):
    """(change ms/request (K,), Welch covariance (K, K), df (K,), captures per arm) of `stages`
    between compare's baseline and `arm`, from the per-capture values; covariance None below
    MIN_UNITS captures in an arm."""
    base = compare["baseline"]
    by = {m["metric"]: m for m in compare["metrics"]}
    change, units = [], []
    for s in stages:
        m = by[f"stages.{s}.host_ms_per_request"]
        a = m["arms"]
        change.append(float(a[arm]["change"]))
        units.append([a[base]["per_capture"], a[arm]["per_capture"]])
    n = [len(units[0][0]), len(units[0][1])]
    for u in units:
        if [len(u[0]), len(u[1])] != n or any(v is None for side in u for v in side):
            raise PredictError(f"{source}: the stages' per-capture values differ in number (not one "
                               "compare of the same captures)")
    if min(n) < MIN_UNITS:
        return np.array(change), None, None, n
    V = np.zeros((len(stages), len(stages)))
    parts = []
    for side, k in ((0, n[0]), (1, n[1])):
        X = np.array([u[side] for u in units], dtype=float)          # (K, captures)
        C = np.atleast_2d(np.cov(X, ddof=1)) / k
        V += C
        parts.append((np.diag(C), k))
    with np.errstate(divide="ignore", invalid="ignore"):
        den = sum(p ** 2 / (k - 1) for p, k in parts)
        df = np.where(den > 0, np.diag(V) ** 2 / den, np.inf)
    return np.array(change), V, df, n


def slope_covariance(observations: list[Observation], result: WhatIf, stages, metric: str):
    """(slopes % per ms (K,), covariance (K, K), df (K,), the slopes): slopes of two stages share
    the baseline servers (weight `base_weight` each), so cov = w_s w_t n0 σ0² in % of the baseline,
    σ0² the baseline's spread with the same HC3 inflation as each slope's own variance."""
    by = {(s.stage, sl.metric): sl for s in result.stages for sl in s.slopes}
    sls = [by.get((s, metric)) for s in stages]
    K = len(stages)
    b = np.array([sl.pct_per_ms if sl and sl.se is not None else np.nan for sl in sls])
    V = np.zeros((K, K))
    df = np.array([sl.df if sl and sl.df is not None else np.inf for sl in sls])
    arrays = stage_arrays(observations, stages[0], metric) if K else None
    for i, si in enumerate(sls):
        if si is None or si.se is None:
            continue
        V[i, i] = (100 * si.se / si.baseline_mean) ** 2
        for j in range(i + 1, K):
            sj = sls[j]
            if sj is None or sj.se is None or arrays is None:
                continue
            y0 = arrays[1][arrays[2] == 0]
            n0 = len(y0)
            s0 = y0.var(ddof=1) * n0 / (n0 - 1)
            V[i, j] = V[j, i] = (1e4 * si.base_weight * sj.base_weight * n0 * s0
                                 / (si.baseline_mean * sj.baseline_mean))
    return b, V, df, sls


def measured(bench: dict, metric: str, baseline: str, arm: str, case: str | None, source: str):
    """bench's measured change of `metric` (None where bench has no such metric)."""
    cases = bench.get("cases") or []
    if case is None and len(cases) > 1:
        raise PredictError(f"{source}: {len(cases)} cases ({', '.join(c['label'] for c in cases)}): "
                           "name one with --case")
    pick = [c for c in cases if case is None or c.get("label") == case]
    if not pick:
        raise PredictError(f"{source}: no case {case!r} (cases: {', '.join(c['label'] for c in cases)})")
    for ch in pick[0]["changes"]:
        if ch["metric"] == BENCH_METRIC.get(metric) and ch["arm"] == arm and ch["baseline"] == baseline:
            ci = ch.get("ci")
            return Measured(float(ch["change_pct"]), *(ci if ci else (None, None)), ch["verdict"]), ch.get("df")
    return None, None


def predict(observations: list[Observation], result: WhatIf, compare: dict, *, stages=None,
            bench: dict | None = None, case: str | None = None, sources=("what-if", "compare", "bench"),
            ) -> Prediction:
    """The predicted change of each metric measured by the what-if, from compare's stage changes."""
    wsrc, csrc, bsrc = sources
    conf = result.confidence
    try:
        base, arms = compare["baseline"], list(compare["arms"])
        compared = [s for s in compare["config"]["stages"]
                    if any(m["metric"] == f"stages.{s}.host_ms_per_request" for m in compare["metrics"])]
    except (KeyError, TypeError):
        raise PredictError(f"{csrc}: not the JSON of clef-prof compare (-f json)") from None
    arm = next(a for a in arms if a != base) if len(arms) > 1 else None
    if arm is None:
        raise PredictError(f"{csrc}: one arm only; compare main vs a PR")
    if len(arms) > 2:
        raise PredictError(f"{csrc}: {len(arms)} arms; predict joins one PR to main: compare two")
    measured_stages = [s.stage for s in result.stages]
    if stages is None:
        stages = tuple(compared)
    else:
        missing = [s for s in stages if s not in compared]
        if missing:
            raise PredictError(f"--stages: {', '.join(missing)} not in the compare {csrc} "
                               f"(it compares {', '.join(compared) or 'no stage'})")
    lacking = [s for s in stages if s not in measured_stages]
    if lacking:
        raise PredictError(f"stage(s) {', '.join(lacking)} of the compare have no slope in the what-if "
                           f"{wsrc} (it measured {', '.join(measured_stages) or 'none'}): give "
                           f"--stages {','.join(s for s in stages if s in measured_stages) or 'STAGES'}"
                           " to predict from the others")
    if bench is not None:
        if bench.get("baseline") != base or arm not in (bench.get("arms") or {}):
            raise PredictError(f"{bsrc}: its arms ({', '.join(bench.get('arms') or {})}; baseline "
                               f"{bench.get('baseline')}) are not the compare's ({base} vs {arm})")
    try:
        d, Vd, dfd, n = stage_changes(compare, stages, arm, csrc)
    except (KeyError, TypeError, ValueError, IndexError):
        raise PredictError(f"{csrc}: its stage metrics lack their arms' changes or per-capture values "
                           "(not compare's JSON?)") from None
    metrics = sorted({sl.metric for s in result.stages for sl in s.slopes},
                     key=lambda m: list(BENCH_METRIC).index(m) if m in BENCH_METRIC else 9)
    if bench is not None:
        try:
            found = [measured(bench, m, base, arm, case, bsrc)[0] for m in metrics]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PredictError(f"{bsrc}: its cases lack their changes (not bench's JSON?)") from None
        if not any(found):
            raise PredictError(f"{bsrc}: none of the what-if's metrics ({', '.join(metrics)}) is in the "
                               f"bench for {arm} vs {base}")
    notes = ["stage changes are compare's, measured under the profiler; slopes are unprofiled"]
    if Vd is None:
        notes.append(f"compare has {min(n)} capture(s) in an arm ({MIN_UNITS} needed for an interval): "
                     "predictions without intervals")
    out = []
    for m in metrics:
        b, Vb, dfb, sls = slope_covariance(observations, result, stages, m)
        terms, refused = [], None
        for i, (s, sl) in enumerate(zip(stages, sls)):
            why = None
            if sl is None or sl.se is None:
                why = "too few servers for a slope" if sl else f"no {m} slope for {s}"
            elif abs(d[i]) > sl.linear_max_ms:
                why = (f"{d[i]:+.3g} ms/request is beyond the measured linear range "
                       f"(+{sl.linear_max_ms:.3g} ms/request)")
            if why:
                terms.append(Term(s, float(d[i]), None, None, None, None, why))
                refused = refused or f"{s}: {why}"
                continue
            p = b[i] * d[i]
            if Vd is None:
                terms.append(Term(s, float(d[i]), float(b[i]), float(p), None, None))
                continue
            est, half, _ = combine(b[i:i + 1], Vb[i:i + 1, i:i + 1], dfb[i:i + 1], d[i:i + 1],
                                   Vd[i:i + 1, i:i + 1], dfd[i:i + 1], conf)
            terms.append(Term(s, float(d[i]), float(b[i]), float(est), float(est - half), float(est + half)))
        mp = MetricPrediction(m, tuple(terms), None, None, None, refused)
        if refused is None:
            if Vd is None:
                mp = MetricPrediction(m, tuple(terms), float((b * d).sum()), None, None)
            else:
                est, half, df = combine(b, Vb, dfb, d, Vd, dfd, conf)
                mp = MetricPrediction(m, tuple(terms), float(est), float(est - half), float(est + half))
        if bench is not None:
            meas, mdf = measured(bench, m, base, arm, case, bsrc)
            unexpl = None
            if meas is not None and mp.pct is not None:
                unexpl = (meas.pct - mp.pct, None, None)
                if meas.lo is not None and mp.lo is not None:
                    tp = float(t_quantile(0.5 + conf / 2, df))
                    tm = float(t_quantile(0.5 + conf / 2, mdf or np.inf))
                    vp, vm = ((mp.hi - mp.lo) / 2 / tp) ** 2, ((meas.hi - meas.lo) / 2 / tm) ** 2
                    du = (vp + vm) ** 2 / (vp ** 2 / float(df) + vm ** 2 / (mdf or np.inf))
                    h = float(t_quantile(0.5 + conf / 2, max(du, 1.0))) * np.sqrt(vp + vm)
                    unexpl = (meas.pct - mp.pct, meas.pct - mp.pct - h, meas.pct - mp.pct + h)
            mp = MetricPrediction(mp.metric, mp.terms, mp.pct, mp.lo, mp.hi, mp.refused, meas, unexpl)
        out.append(mp)
    return Prediction(conf, base, arm, tuple(stages), tuple(out), tuple(notes))
