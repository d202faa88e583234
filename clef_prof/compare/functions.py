"""compare's function-level change per stage: which Python functions inside a stage got faster or
slower between arms, from the samples of clef-prof's sampler (analyze.figures.samples; docs/sampling.md).

The figure of a function in a stage is its **self ms per request**: its self samples (its frame
the innermost) x the ms one sample stands for / the capture's requests. It is compared rather than
its share of the stage's samples because a share moves when another function changes: a function
that did not change loses share when its neighbour gets slower, its ms per request stays.

The verdict is compare's: each capture gives one value (its own self samples x its own ms per
sample / its own requests), and the change is Welch's t interval between the arms' per-capture
values (`welch`, on logs where every value is positive, else on the values), from 3 captures per
arm. The sampling noise of a capture (a binomial count) is part of its value's spread between
captures, so the interval holds it with no model of its own; the seeded simulation in
tests/compare/test_function_changes.py holds it to its coverage at 3 to 8 captures per arm and
5 to 500 expected samples per capture.

The functions shown per stage: the top `TOP` by self samples of each arm (pooled over its
captures), in the order of their largest ms per request in any arm.
"""
from __future__ import annotations

import numpy as np

from . import welch

TOP = 5


def _per_capture(d, stages: tuple[str, ...]) -> dict[str, tuple[int, dict[tuple[str, str], int]]] | None:
    """{stage: (its samples, {(function, file): self samples})} of one capture; None without samples."""
    sc = getattr(d, "samples", None)
    if sc is None:
        return None
    self_, _ = sc.function_counts()
    out = {}
    for s in stages:
        j = sc.slots.index(s)
        row = self_[j]
        nz = np.flatnonzero(row)
        out[s] = (int(sc.counts[j].sum()), {(sc.func_name[f], sc.func_file[f]): int(row[f]) for f in nz.tolist()})
    return out


def _scale(d) -> float | None:
    """ms per request one sample stands for in this capture: ms per sample / requests (one ns of
    function self time for a Kineto trace's python_function events)."""
    sc, r = getattr(d, "samples", None), d.result
    if sc is None or not r.requests:
        return None
    if sc.unit == "ns":
        return 1e-6 / r.requests
    return None if sc.ms_per_sample is None else sc.ms_per_sample / r.requests


def verdict_fields(base_units: list[float], arm_units: list[float], base_mean: float, confidence: float) -> dict:
    """compare's verdict fields of one change from per-capture values (the same as its metrics')."""
    out = {"ci": None, "ci_pct": None, "scale": None, "df": None, "se": None, "p": None, "mdc": None, "mdc_pct": None,
           "beyond_noise": False}
    if min(len(base_units), len(arm_units)) >= 2:
        w = welch.unit_interval(base_units, arm_units, confidence)
        lo, hi, mdc = (float(v) for v in w.absolute(base_mean))
        plo, phi, pmdc = (float(v) if base_mean else None for v in w.pct(base_mean))
        out.update({"scale": "log" if bool(w.log) else "linear", "df": float(w.df) if np.isfinite(w.df) else None,
                    "se": float(w.se)})
        if w.judged:            # no verdict, no power statement
            out.update({"ci": [lo, hi], "ci_pct": None if plo is None else [plo, phi], "mdc": mdc, "mdc_pct": pmdc,
                        "p": float(welch.p_value(w.diff, w.se, w.df)),
                        "beyond_noise": bool(welch.beyond(lo, hi))})
    low = min(len(base_units), len(arm_units))
    out["verdict"] = (("beyond noise" if out["beyond_noise"] else "within noise") if out["ci"] is not None else
                      f"too few captures to judge ({low} in an arm; {welch.MIN_UNITS} needed)")
    return out


def function_changes(names: list[str], data: dict, stages: tuple[str, ...], confidence: float) -> tuple[dict | None, list[str]]:
    """(the `functions` part of compare's JSON, notes); (None, notes) when not every capture holds
    Python samples."""
    per = {n: [_per_capture(d, stages) for d in data[n]] for n in names}
    scales = {n: [_scale(d) for d in data[n]] for n in names}
    total = sum(len(v) for v in per.values())
    have = sum(p is not None and s is not None for n in names for p, s in zip(per[n], scales[n]))
    if have == 0:
        return None, []
    if have < total:
        return None, [f"Python samples in {have} of {total} captures: no function-level change (record every "
                      "capture with the sampler on, e.g. `clef-prof record --python-sampling 100`)"]
    base = names[0]
    out = {}
    for s in stages:
        stage_samples = {n: sum(p[s][0] for p in per[n]) for n in names}
        if not all(stage_samples.values()):
            continue
        pooled: dict[str, dict[tuple[str, str], int]] = {}
        for n in names:
            acc: dict[tuple[str, str], int] = {}
            for p in per[n]:
                for k, v in p[s][1].items():
                    acc[k] = acc.get(k, 0) + v
            pooled[n] = acc
        requests = {n: sum(d.result.requests for d in data[n]) for n in names}
        # pooled ms per request: Σ (samples x ms per sample) / Σ requests, each capture its own rate
        def arm_ms(n, key):
            return sum(p[s][1].get(key, 0) * sc * d.result.requests for p, sc, d in zip(per[n], scales[n], data[n])) \
                / requests[n]

        keys = []
        for n in names:
            for k in sorted(pooled[n], key=lambda k: (-pooled[n][k], k))[:TOP]:
                if k not in keys:
                    keys.append(k)
        keys.sort(key=lambda k: (-max(arm_ms(n, k) for n in names), k))
        rows = []
        for key in keys:
            entry = {"function": key[0], "file": key[1], "arms": {}}
            for n in names:
                entry["arms"][n] = {"self_ms_per_request": arm_ms(n, key), "self_samples": pooled[n].get(key, 0),
                                    "stage_samples": stage_samples[n],
                                    "self_share": pooled[n].get(key, 0) / stage_samples[n],
                                    "per_capture": [p[s][1].get(key, 0) * sc for p, sc in zip(per[n], scales[n])]}
            b_mean = entry["arms"][base]["self_ms_per_request"]
            for n in names[1:]:
                a = entry["arms"][n]
                change = a["self_ms_per_request"] - b_mean
                a.update({"change": change, "change_pct": 100.0 * change / b_mean if b_mean else None})
                a.update(verdict_fields(entry["arms"][base]["per_capture"], a["per_capture"], b_mean, confidence))
            first = entry["arms"][names[1]]
            entry.update({k: first[k] for k in ("change", "change_pct", "ci", "ci_pct", "beyond_noise", "verdict",
                                                "mdc", "mdc_pct")})
            rows.append(entry)
        out[s] = {"samples": stage_samples, "functions": rows}
    return {"figure": "self ms per request (self samples x ms per sample / requests, per capture)",
            "top": TOP, "stages": out}, []
