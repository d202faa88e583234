"""`clef-prof bench` figures: per case and arm, the changes from the baseline with their intervals.

Throughput of an arm = Σ completions / Σ elapsed s over its windows; latency p50/p99 = the mean
of the windows' percentiles. A fresh server is the unit that varies: each server's figure is the
same ratio of sums over its own windows, and the interval of a change is Welch's t interval
between the arms' servers on the log of those figures (`compare.welch`), reported in % of the
baseline as exp(CI) - 1 and in the metric's unit as the baseline figure times that. Below
`welch.MIN_UNITS` servers in an arm there is no verdict; every verdict states the change its
design finds 80% of the time (`welch.detect_factor`).
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..compare import welch
from ..base.errors import ClefError
from ..compare.gates import gate_status

METRICS = {  # name: (numerator column, denominator column, unit)
    "throughput_rps": ("completions", "elapsed_s", "req/s"),
    "latency_ms_p50": ("latency_ms_p50", None, "ms"),
    "latency_ms_p90": ("latency_ms_p90", None, "ms"),
    "latency_ms_p99": ("latency_ms_p99", None, "ms"),
    "latency_ms_mean": ("latency_ms_mean", None, "ms"),
}
# with --slo: the requests that met every SLO per second (a window's `good` over its elapsed time)
GOODPUT = {"goodput_rps": ("good", "elapsed_s", "req/s")}
FIGURES = {**METRICS, **GOODPUT}
SCHEMA = "clef-prof/bench/2"


def _real(v) -> float | None:
    """v as a finite float, None where it is not one (a string, a bool, NaN, inf, missing)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def usable(windows: list[dict]) -> tuple[list[dict], list[str]]:
    """The windows that are measurements, and a note for each one that is not: completions must be
    a finite count >= 0 and elapsed_s a finite time > 0 (a saved report may have been edited or
    damaged), a latency finite and > 0 where given. A refused window gives no figure and no verdict."""
    kept, notes = [], []
    for w in windows:
        bad = []
        c, e = _real(w.get("completions")), _real(w.get("elapsed_s"))
        if c is None or c < 0:
            bad.append(f"completions {w.get('completions')!r}")
        if e is None or e <= 0:
            bad.append(f"elapsed_s {w.get('elapsed_s')!r}")
        for m, (num, den, _) in METRICS.items():
            if den is None and w.get(num) is not None and ((_real(w[num]) or 0.0) <= 0):
                bad.append(f"{num} {w[num]!r}")
        if bad:
            notes.append(f"window {w.get('seq')} (arm {w.get('arm')}, server {w.get('server')}) left out: "
                         f"{', '.join(bad)} is not a measurement")
        else:
            kept.append(w)
    return kept, notes


def _blocks(windows: list[dict], metric: str) -> list[np.ndarray]:
    """One (windows, 2) array per server: numerator and denominator columns."""
    num, den, _ = FIGURES[metric]
    by_server: dict[int, list] = {}
    for w in windows:
        v = w.get(num)
        if v is None:
            continue
        by_server.setdefault(w["server"], []).append((float(v), float(w[den]) if den else 1.0))
    return [np.array(rows, dtype=np.float64) for _, rows in sorted(by_server.items())]


def server_values(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Each server's figure: Σ numerator / Σ denominator over its windows (the last axis)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return num.sum(-1) / den.sum(-1)


def _point(blocks: list[np.ndarray]) -> float | None:
    if not blocks:
        return None
    x = np.concatenate(blocks)
    return float(server_values(x[:, 0], x[:, 1])) if x[:, 1].sum() else None


def _per_server(blocks: list[np.ndarray]) -> list[float]:
    return [float(server_values(b[:, 0], b[:, 1])) for b in blocks]


def _peak(windows: list[dict], key: str):
    v = [w[key] for w in windows if w.get(key) is not None]
    return max(v) if v else None


def arm_figures(windows: list[dict]) -> dict:
    """An arm's figures in one case, from its windows."""
    out = {m: _point(_blocks(windows, m)) for m in METRICS}
    if any(w.get("good") is not None for w in windows):
        out["goodput_rps"] = _point(_blocks(windows, "goodput_rps"))
        out["good"] = sum(w.get("good") or 0 for w in windows)
    per_server = _per_server(_blocks(windows, "throughput_rps"))
    rates = [w["throughput_rps"] for w in windows]
    kinds: dict[str, int] = {}
    for w in windows:
        for k, n in w["error_kinds"].items():
            kinds[k] = kinds.get(k, 0) + n
    out.update({
        "device_memory_peak_mib": _peak(windows, "device_memory_peak_mib"),
        "server_device_memory_peak_mib": _peak(windows, "server_device_memory_peak_mib"),
        "host_rss_peak_mib": _peak(windows, "host_rss_peak_mib"),
        "sm_clock_mhz_min": min((w["sm_clock_mhz_min"] for w in windows if w.get("sm_clock_mhz_min")), default=None),
        "temperature_c_max": _peak(windows, "temperature_c_max"),
        "completions": sum(w["completions"] for w in windows),
        "errors": {"count": sum(w["errors"] for w in windows), "kinds": kinds},
        "servers": len({w["server"] for w in windows}), "window_count": len(windows),
        "window_range_rps": [min(rates), max(rates)] if rates else None,
        "server_rps": per_server, "server_spread_pct": welch.spread_pct(per_server),
        "flags": sorted({f for w in windows for f in w.get("flags", [])}),
        "server_metrics": server_metrics(windows),
        "windows": windows,
    })
    return out


def too_few(n: int) -> str:
    return f"too few servers to judge ({n} in an arm; {welch.MIN_UNITS} needed)"


def verdict(lo: float, hi: float) -> str:
    return "beyond noise" if welch.beyond(lo, hi) else "within noise"


def slots(case_windows: dict[str, list[dict]]) -> dict[str, list[int]] | None:
    """Each arm's servers' places in the run order (0, 1, ...; in the order of `_blocks`), from
    their first window's `seq`; None where a window has no seq (a report saved before it) or two
    servers start at one seq."""
    first: dict[tuple[str, int], float] = {}
    for arm, ws in case_windows.items():
        for w in ws:
            q = _real(w.get("seq"))
            if q is None:
                return None
            key = (arm, w["server"])
            first[key] = min(first.get(key, q), q)
    if len(set(first.values())) < len(first):       # two servers at one place: no run order
        return None
    rank = {k: i for i, k in enumerate(sorted(first, key=first.get))}
    return {arm: [rank[(arm, sv)] for sv in sorted({w["server"] for w in ws})] for arm, ws in case_windows.items()}


def _interval(base_blocks, arm_blocks, order, baseline: str, arm: str, confidence: float):
    """(interval, drift or None): in run order where the windows say it (`welch.ordered_interval`:
    servers as units, a linear drift over server slots fitted beside the change), else Welch's."""
    b, a = _per_server(base_blocks), _per_server(arm_blocks)
    if order is not None and len(order[baseline]) == len(b) and len(order[arm]) == len(a):
        try:
            return welch.ordered_interval(b, a, order[baseline], order[arm], confidence)
        except ValueError:
            pass
    return welch.unit_interval(b, a, confidence), None


def changes(case_windows: dict[str, list[dict]], baseline: str, confidence: float) -> list[dict]:
    """Each metric's change from the baseline for every other arm, with its interval between the
    arms' servers (servers = units; see the module's docstring)."""
    names = list(case_windows)
    order = slots(case_windows)
    out = []
    for metric in FIGURES:
        blocks = {n: _blocks(case_windows[n], metric) for n in names}
        if not all(blocks.values()):
            continue
        base = _point(blocks[baseline])
        for n in names:
            if n == baseline:
                continue
            value = _point(blocks[n])
            change = value - base
            pct = 100.0 * change / base if base else None
            n_base, n_arm = len(blocks[baseline]), len(blocks[n])
            c = {"metric": metric, "arm": n, "baseline": baseline, "unit": FIGURES[metric][2],
                 "baseline_value": base, "value": value, "change": change, "change_pct": pct,
                 "servers": [n_base, n_arm], "ci": None, "ci_abs": None, "scale": None, "df": None, "se": None, "p": None,
                 "mdc_pct": None, "mdc_abs": None, "beyond_noise": False, "interval": None, "drift": None}
            dead = [n_ for n_, b in ((baseline, blocks[baseline]), (n, blocks[n]))
                     if not all(v > 0 for v in _per_server(b))]
            if dead:
                # a server that completed nothing has no figure on the log scale, and the linear
                # scale's interval then reaches below -100%: no verdict
                c["verdict"] = (f"not judged: a server of {' and '.join(dead)} has no {metric} "
                                + ("(no request of it met the SLOs)" if metric in GOODPUT else
                                   "(it completed no request)"))
                out.append(c)
                continue
            if min(n_base, n_arm) >= 2:
                w, drift = _interval(blocks[baseline], blocks[n], order, baseline, n, confidence)
                lo, hi, mdc = (float(v) for v in w.pct(base))
                alo, ahi, amdc = (float(v) for v in w.absolute(base))
                c.update({"scale": "log" if bool(w.log) else "linear", "df": float(w.df) if np.isfinite(w.df) else None,
                          "se": float(w.se), "interval": "welch" if drift is None else "run order"})
                if drift is not None and bool(w.log):
                    d = [100.0 * math.expm1(float(v)) for v in (drift.slope, drift.lo, drift.hi)]
                    c["drift"] = {"pct_per_server": d[0], "ci": d[1:], "beyond_noise": bool(welch.beyond(*d[1:]))}
                if w.judged:            # no verdict, no power statement
                    c.update({"ci": [lo, hi], "ci_abs": [alo, ahi], "beyond_noise": bool(welch.beyond(alo, ahi)),
                              "p": float(welch.p_value(w.diff, w.se, w.df)),
                              "mdc_pct": mdc, "mdc_abs": amdc})
            c["verdict"] = too_few(min(n_base, n_arm)) if c["ci_abs"] is None else verdict(*c["ci_abs"])
            out.append(c)
    return out


def gate_view(case_result: dict, confidence: float = 0.95) -> dict:
    """A case's changes in the shape compare's evaluate_gates reads."""
    metrics: dict[str, dict] = {}
    for c in case_result["changes"]:
        m = metrics.setdefault(c["metric"], {"metric": c["metric"], "deterministic": False,
                                             "arms": {c["baseline"]: {"mean": c["baseline_value"]}}})
        m["arms"][c["arm"]] = {"change": c["change"], "change_pct": c["change_pct"], "ci": c["ci_abs"],
                               "ci_pct": c["ci"], "verdict": c["verdict"], "se": c.get("se"), "df": c.get("df"),
                               "scale": c.get("scale")}
    return {"baseline": case_result["baseline"], "metrics": list(metrics.values()),
            "method": {"confidence": confidence}}


# ---------------------------------------------------------------------------------------------
# SLOs, load points and saturation

SLO_ALIASES = {"p50_ms": "latency_ms_p50", "p90_ms": "latency_ms_p90", "p99_ms": "latency_ms_p99",
               "mean_ms": "latency_ms_mean"}
LATENCY = [m for m in METRICS if METRICS[m][2] == "ms"]
_SLO = re.compile(r"^\s*([A-Za-z0-9_]+)\s*<=\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?:ms)?\s*$")
ACHIEVED_MIN = 0.9     # open loop: achieved below 90% of the offered rate is saturation
ELASTICITY_MIN = 0.5   # closed loop: req/s growing by less than C^0.5 as C grows is saturation


class SloError(ClefError):
    pass


def parse_slo(text: str) -> dict:
    """`latency_ms_p99<=200` (or `p99_ms<=200`): {"text", "metric", "max_ms"}."""
    m = _SLO.match(text)
    name = m and SLO_ALIASES.get(m[1], m[1])
    if not m or name not in LATENCY or float(m[2]) <= 0:
        raise SloError(f"--slo {text!r}: expected METRIC<=MS with METRIC one of {', '.join(LATENCY)} (or "
                       f"{', '.join(SLO_ALIASES)}) and MS > 0, e.g. \"p99_ms<=200\"")
    return {"text": f"{name}<={float(m[2]):g}", "metric": name, "max_ms": float(m[2])}


def load_axis(case: dict) -> tuple[tuple, str, float]:
    """(group, loop, load) of a case: the cases that differ only in load form a group; the load is
    the offered rate (open loop) or the concurrency (closed loop)."""
    if case.get("rate"):
        return (case["words"], case["questions"], "open", case["concurrency"]), "open", float(case["rate"])
    return (case["words"], case["questions"], "closed", None), "closed", float(case["concurrency"])


def group_label(group: tuple) -> str:
    words, q, loop, c = group
    return f"{words} words / {q} q, " + (f"open loop (at most {c} connections)" if loop == "open" else "closed loop")


def slo_case(arms: dict, slos: list[dict]) -> dict:
    """Per arm of one case: whether its figures meet every SLO, which do not, and how many of its
    servers' own figures meet them all."""
    out = {}
    for name, a in arms.items():
        failing = [s["text"] for s in slos if a.get(s["metric"]) is None or a[s["metric"]] > s["max_ms"]]
        per = [_per_server(_blocks(a["windows"], s["metric"])) for s in slos]
        meeting = sum(all(p[i] <= s["max_ms"] for p, s in zip(per, slos)) for i in range(min(map(len, per))))
        out[name] = {"meets": not failing, "failing": failing, "servers_meeting": meeting, "servers": a["servers"],
                     "goodput_rps": a.get("goodput_rps"),
                     "worst": max((a[s["metric"]] / s["max_ms"] for s in slos if a.get(s["metric"]) is not None),
                                  default=None)}
    return out


def slo_loads(cases: list[dict], slos: list[dict]) -> list[dict]:
    """Per group of load points and arm: the highest load whose figures meet every SLO, else the
    load point closest to them (its worst figure / its SLO)."""
    groups: dict[tuple, list[dict]] = {}
    for c in cases:
        groups.setdefault(load_axis(c["case"])[0], []).append(c)
    out = []
    for g, cs in groups.items():
        cs = sorted(cs, key=lambda c: load_axis(c["case"])[2])
        loop = g[2]
        arms = {}
        for name in cs[0]["arms"]:
            met = [c for c in cs if c["slo"][name]["meets"]]
            best = met[-1] if met else None
            close = None if met else min((c for c in cs if c["slo"][name]["worst"] is not None),
                                         key=lambda c: c["slo"][name]["worst"], default=None)
            arms[name] = {"highest": best["label"] if best else None,
                          "load": load_axis(best["case"])[2] if best else None,
                          "goodput_rps": best["arms"][name].get("goodput_rps") if best else None,
                          "closest": None if close is None else {
                              "case": close["label"], "failing": close["slo"][name]["failing"],
                              "worst_over_slo": close["slo"][name]["worst"]}}
        out.append({"group": group_label(g), "loop": loop, "unit": "req/s offered" if loop == "open" else "clients",
                    "loads": [load_axis(c["case"])[2] for c in cs], "arms": arms})
    return out


def _log_ratio(a, b) -> float | None:
    return math.log(a / b) if a and b and a > 0 and b > 0 else None


def saturation(cases: list[dict]) -> None:
    """Each case's `saturation` per arm: offered vs achieved rate (open loop) or the concurrency the
    server held by Little's law, req/s × mean latency (closed loop), latency's growth from the
    group's lowest load, the elasticities of req/s and latency to load from the load point below,
    and the flag with its evidence: achieved < ACHIEVED_MIN × offered (open loop), req/s
    elasticity < ELASTICITY_MIN (closed loop)."""
    groups: dict[tuple, list[dict]] = {}
    for c in cases:
        groups.setdefault(load_axis(c["case"])[0], []).append(c)
    for cs in groups.values():
        cs.sort(key=lambda c: load_axis(c["case"])[2])
        for k, c in enumerate(cs):
            _, loop, load = load_axis(c["case"])
            c["saturation"] = {}
            for name, a in c["arms"].items():
                x, lat = a.get("throughput_rps"), a.get("latency_ms_mean")
                low = cs[0]["arms"][name]
                prev = cs[k - 1] if k else None
                s = {"loop": loop, "load": load, "lowest_load": load_axis(cs[0]["case"])[2], "achieved_rps": x,
                     "concurrency_held": x * lat / 1000 if x is not None and lat is not None else None,
                     "latency_growth": {p: (a[m] / low[m] if a.get(m) and low.get(m) else None)
                                        for p, m in (("p50", "latency_ms_p50"), ("p99", "latency_ms_p99"))},
                     "throughput_elasticity": None, "latency_elasticity": None}
                if prev is not None:
                    dl = math.log(load / load_axis(prev["case"])[2])
                    p = prev["arms"][name]
                    ex, ew = _log_ratio(x, p.get("throughput_rps")), _log_ratio(lat, p.get("latency_ms_mean"))
                    s["throughput_elasticity"] = ex / dl if ex is not None else None
                    s["latency_elasticity"] = ew / dl if ew is not None else None
                if loop == "open":
                    sent = sum(w.get("send_s") or 0 for w in a["windows"])
                    offered = sum(w.get("offered") or 0 for w in a["windows"]) / sent if sent else load
                    s["offered_rps"] = offered
                    s["achieved_ratio"] = x / offered if x is not None and offered else None
                    s["saturated"] = s["achieved_ratio"] is not None and s["achieved_ratio"] < ACHIEVED_MIN
                    s["evidence"] = (f"achieved {_num(x)} of {_num(offered)} req/s offered "
                                     f"({100 * s['achieved_ratio']:.0f}%; saturated below {100 * ACHIEVED_MIN:g}%)"
                                     if s["achieved_ratio"] is not None else "no request answered")
                else:
                    e = s["throughput_elasticity"]
                    s["saturated"] = e is not None and e < ELASTICITY_MIN
                    held = s["concurrency_held"]
                    s["evidence"] = (f"C={load:g}: held {held:.3g} in flight (req/s × mean latency)" if held is not None
                                     else f"C={load:g}: no request answered")
                    if e is not None:
                        s["evidence"] += (f"; req/s grew as C^{e:.2f} from C={load_axis(prev['case'])[2]:g} "
                                          f"(saturated below C^{ELASTICITY_MIN:g})")
                    elif prev is None:
                        s["evidence"] += "; the lowest load point: no growth to judge"
                c["saturation"][name] = s


def capacity(cases: list[dict], confidence: float) -> list[dict]:
    """Per load group and arm, the capacity the load reached: requests/s at the highest load point
    flagged saturated (past the knee, achieved stays at capacity), with the t interval of its
    servers' figures on logs (servers as units; none below MIN_UNITS); None where no load point
    of the arm saturated (the sweep stayed below its knee)."""
    groups: dict[tuple, list[dict]] = {}
    for c in cases:
        groups.setdefault(load_axis(c["case"])[0], []).append(c)
    out = []
    for g, cs in groups.items():
        arms = {}
        for name in cs[0]["arms"]:
            sat = [c for c in cs if c["saturation"][name]["saturated"]]
            if not sat:
                arms[name] = None
                continue
            c = max(sat, key=lambda c: load_axis(c["case"])[2])
            a = c["arms"][name]
            logs = np.log([v for v in a["server_rps"] if v > 0])
            ci = None
            if len(logs) >= welch.MIN_UNITS:
                half = float(welch.t_quantile(0.5 + confidence / 2, len(logs) - 1)) * logs.std(ddof=1) / math.sqrt(len(logs))
                ci = [math.exp(logs.mean() - half), math.exp(logs.mean() + half)]
            arms[name] = {"case": c["label"], "load": load_axis(c["case"])[2], "capacity_rps": a["throughput_rps"],
                          "ci": ci, "servers": len(logs)}
        out.append({"group": group_label(g), "loop": g[2], "arms": arms})
    return out


def server_metrics(windows: list[dict]) -> dict | None:
    """The server's own gauges over its windows (GET /metrics): queue depth and running requests,
    the mean of the windows' means and the highest sample; None when none was scraped."""
    out = {}
    for key in ("queue_waiting", "requests_running"):
        means = [w[key + "_mean"] for w in windows if w.get(key + "_mean") is not None]
        if means:
            out[key] = {"mean": sum(means) / len(means), "max": max(w[key + "_max"] for w in windows
                                                                     if w.get(key + "_max") is not None)}
    return out or None


# ---------------------------------------------------------------------------------------------
# rendering


def _num(v, digits: int = 4) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _pct(v) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:+.2f}%"


def verdict_text(c: dict) -> str:
    """The verdict and the change its design finds 80% of the time (none without a verdict)."""
    if c.get("ci") is None or c.get("mdc_pct") is None or not math.isfinite(c["mdc_pct"]):
        return c["verdict"]
    return f"{c['verdict']} (detects ±{c['mdc_pct']:.1f}%)"


def _many(result: dict) -> bool:
    """More than one arm beside the baseline: the table gets an arm column."""
    return len(result["arms"]) > 2


def rows(result: dict) -> list[list[str]]:
    """Table rows: C | words / questions | [arm |] req/s base → arm | change | CI | p50 | p99 | peak device MiB |
    verdict; the arm column only with 3 or more arms, one row per case and arm."""
    out = []
    base = result["baseline"]
    many = _many(result)
    for case in result["cases"]:
        k, arms = case["case"], case["arms"]
        by = {(c["arm"], c["metric"]): c for c in case["changes"]}
        for name in [n for n in arms if n != base]:
            t = by.get((name, "throughput_rps"))
            a, b = arms[base], arms[name]
            c = f"{k['concurrency']}" + (f" @ {k['rate']:g}/s" if k.get("rate") else "")
            dev = (f"{_num(a['device_memory_peak_mib'], 6)} → {_num(b['device_memory_peak_mib'], 6)}"
                   if a["device_memory_peak_mib"] is not None or b["device_memory_peak_mib"] is not None else "—")
            out.append([c, f"{k['words']} / {k['questions']}", *([name] if many else []),
                        f"{_num(a['throughput_rps'])} → {_num(b['throughput_rps'])}",
                        _pct(t["change_pct"]) if t else "—",
                        f"{_pct(t['ci'][0])} … {_pct(t['ci'][1])}" if t and t["ci"] else "—",
                        f"{_num(a['latency_ms_p50'])} → {_num(b['latency_ms_p50'])}",
                        f"{_num(a['latency_ms_p99'])} → {_num(b['latency_ms_p99'])}", dev,
                        verdict_text(t) if t else "—"])
    return out


def header(result: dict) -> list[str]:
    names = list(result["arms"])
    arm = "arm" if _many(result) else names[1]
    return ["C", "words / questions", *(["arm"] if _many(result) else []), f"req/s {result['baseline']} → {arm}",
            "change",
            f"{100 * result['method']['confidence']:g}% CI", "p50 ms", "p99 ms", "peak device MiB", "verdict"]


def footer_lines(result: dict) -> list[str]:
    """Window ranges, errors, flags, parity, the method and the time it took."""
    lines = []
    for case in result["cases"]:
        ranges = "; ".join(f"{n} {_num(a['window_range_rps'][0])}–{_num(a['window_range_rps'][1])} req/s over "
                           f"{_n(a['window_count'], 'window')} of {_n(a['servers'], 'server')}"
                           for n, a in case["arms"].items() if a["window_range_rps"])
        lines.append(f"{case['label']}: window means {ranges}")
        spread = "; ".join(f"{n} {a['server_spread_pct']:.1f}%" for n, a in case["arms"].items()
                           if a.get("server_spread_pct") is not None)
        if spread:
            lines.append(f"{case['label']}: spread between servers (sd of log req/s): {spread}")
        for n, a in case["arms"].items():
            if a["errors"]["count"]:
                kinds = ", ".join(f"{k}: {v}" for k, v in sorted(a["errors"]["kinds"].items()))
                lines.append(f"{case['label']}: {n}: {a['errors']['count']} errors of "
                             f"{a['errors']['count'] + a['completions']} requests ({kinds})")
            for f in a["flags"]:
                lines.append(f"{case['label']}: {n}: {f}")
    for case in result["cases"]:
        for c in case["changes"]:
            d = c.get("drift")
            if c["metric"] == "throughput_rps" and d and c.get("ci") is not None:
                lines.append(f"{case['label']}: drift check ({c['arm']} vs {c['baseline']}, req/s): "
                             f"{_pct(d['pct_per_server'])} per server in run order [{_pct(d['ci'][0])}, "
                             f"{_pct(d['ci'][1])}], " + ("beyond noise: the machine drifted during the run; the "
                                                        "intervals take a linear drift out, not a step" if
                                                        d["beyond_noise"] else "within noise"))
    lines += slo_lines(result) + saturation_lines(result) + capacity_lines(result) + server_metric_lines(result)
    par = result.get("parity")
    if par:
        for n, p in par["arms"].items():
            if not p["servers"]:
                continue
            lines.append(f"outputs matched ({n} vs {par['reference']}): {p['matched']} of {p['bodies']}"
                         + (f" on {p['servers']} servers" if p["servers"] > 1 else "")
                         + (f", numbers within {par['tolerance']:g}" if par["tolerance"] else ", exactly"))
    m = result["method"]
    lines.append(f"Method: requests/s = Σ completions / Σ elapsed s (drained requests included) over the windows; "
                 f"p50/p99 = mean of the windows' percentiles; {m['load']}; interval: {_interval_words(result)}, "
                 f"shown as exp(CI) - 1; "
                 f"beyond noise = the interval excludes 0; 'detects' = the change this design finds 80% of "
                 f"the time, its spread being measured (noncentral t). Servers per arm: "
                 + ", ".join(f"{n} {a['servers']}" for n, a in result["arms"].items())
                 + f"; {m['windows']} × {m['window_s']:g} s window{'s' if m['windows'] > 1 else ''} per case and server after {m['warmup_s']:g} s "
                 f"of warm-up; order {m['order']}, case order reversed every other server; took "
                 f"{result['duration_s']:.0f} s.")
    if m.get("from"):
        lines.append(f"Re-judged from the saved windows of {m['from']} at {100 * m['confidence']:g}% (no server "
                     "started).")
    low = min(a["servers"] for a in result["arms"].values())
    if low < welch.MIN_UNITS:
        lines.append(f"With {low} server{'s' if low != 1 else ''} in an arm there is no verdict: servers vary from "
                     f"start to start more than windows do, and {welch.MIN_UNITS} per arm is the least that gives "
                     f"an interval that holds its confidence (run more --rounds).")
    from ..compare.family import family_line
    for n, f in (result.get("family") or {}).items():
        line = family_line(f"{n} vs {result['baseline']}", f, m["confidence"])
        if line:
            lines.append(line)
    lines += [f"note: {n}" for n in result["notes"]]
    return lines


def slo_lines(result: dict) -> list[str]:
    """Per case each arm's SLO verdict and goodput, the goodput change; per load group the highest
    load meeting the SLOs (or the closest)."""
    slo = result.get("slo")
    if not slo:
        return []
    lines = []
    for case in result["cases"]:
        arms = "; ".join(f"{n} {'meets' if s['meets'] else 'misses ' + ', '.join(s['failing'])} "
                         f"({s['servers_meeting']} of {_n(s['servers'], 'server')}), goodput "
                         f"{_num(s['goodput_rps'])} req/s" for n, s in case["slo"].items())
        lines.append(f"{case['label']}: SLO {' and '.join(x['text'] for x in slo['slos'])}: {arms}")
        for c in case["changes"]:
            if c["metric"] == "goodput_rps":
                ci = f" [{_pct(c['ci'][0])}, {_pct(c['ci'][1])}]" if c["ci"] else ""
                lines.append(f"{case['label']}: goodput {c['arm']} vs {c['baseline']}: {_pct(c['change_pct'])}{ci}, "
                             f"{verdict_text(c)}")
    for g in slo["loads"]:
        parts = []
        for n, a in g["arms"].items():
            if a["highest"] is not None:
                parts.append(f"{n} {a['load']:g} {g['unit']} ({_num(a['goodput_rps'])} req/s good)")
            elif a["closest"]:
                parts.append(f"{n} none; closest {a['closest']['case']} ({', '.join(a['closest']['failing'])} at "
                             f"{a['closest']['worst_over_slo']:.2f}× its SLO)")
            else:
                parts.append(f"{n} none (no answer)")
        lines.append(f"highest load meeting every SLO, {g['group']}: " + "; ".join(parts))
    lines.append(f"goodput = requests answered within {slo['per_request_ms']:g} ms (the tightest SLO) per second "
                 "of each window's elapsed time; a load point meets the SLOs when the arm's figures (mean of the "
                 "windows' percentiles) are all within them")
    return lines


def saturation_lines(result: dict) -> list[str]:
    """Per case, each arm saturated or not with the evidence, and latency's growth with load; a
    closed loop's lowest load point is left out (no growth to judge: JSON only)."""
    lines = []
    for case in result["cases"]:
        parts = []
        for n, s in (case.get("saturation") or {}).items():
            if s["loop"] == "closed" and s["throughput_elasticity"] is None:
                continue
            growth = ", ".join(f"{p} ×{v:.2f}" for p, v in s["latency_growth"].items() if v is not None)
            parts.append(f"{n} {'SATURATED' if s['saturated'] else 'not saturated'}: {s['evidence']}"
                         + (f"; latency {growth} of the lowest load ({s['lowest_load']:g})"
                            if growth and s["load"] != s["lowest_load"] else ""))
        if parts:
            lines.append(f"{case['label']}: " + "; ".join(parts))
    return lines


def capacity_lines(result: dict) -> list[str]:
    """Per load group with a saturated point, each arm's capacity with its interval."""
    lines = []
    conf = f"{100 * result['method']['confidence']:g}%"
    for g in result.get("capacity") or []:
        if not any(g["arms"].values()):
            continue
        parts = []
        for n, a in g["arms"].items():
            if a is None:
                parts.append(f"{n} not reached (no load point saturated)")
            else:
                ci = f" [{_num(a['ci'][0])}, {_num(a['ci'][1])}]" if a["ci"] else f" ({too_few(a['servers'])})"
                parts.append(f"{n} {_num(a['capacity_rps'])} req/s{ci} at {a['case']}")
        lines.append(f"capacity (req/s at the highest saturated load, {conf} CI over servers), {g['group']}: "
                     + "; ".join(parts))
    return lines


def server_metric_lines(result: dict) -> list[str]:
    """Per case, the servers' own queue depth and running requests (their /metrics), per arm."""
    lines = []
    names = {"queue_waiting": "waiting", "requests_running": "running"}
    for case in result["cases"]:
        parts = [f"{n} " + ", ".join(f"{names[k]} {v['mean']:.3g} mean, {v['max']:g} max" for k, v in sm.items())
                 for n, a in case["arms"].items() if (sm := a.get("server_metrics"))]
        if parts:
            lines.append(f"{case['label']}: the servers' queue (GET {result['method'].get('metrics_url')}): "
                         + "; ".join(parts))
    return lines


def _interval_words(result: dict) -> str:
    kinds = {c.get("interval") for case in result["cases"] for c in case["changes"]} - {None}
    ordered = ("each server's figure over its windows, on logs, by least squares on its arm and its slot in the "
               "run order (a linear drift fitted beside the change, df = servers - 3)")
    welch_ = "Welch t between the arms' servers (each server's figure over its windows, on logs, Satterthwaite df)"
    if kinds == {"run order"}:
        return ordered
    if kinds == {"welch"}:
        return welch_
    return f"{ordered}; {welch_} where the windows carry no run order"


def render_markdown(result: dict) -> str:
    names = list(result["arms"])
    lead = 3 if _many(result) else 2
    out = [f"### clef-prof bench: {' → '.join(names)}", "", "| " + " | ".join(header(result)) + " |",
           "|" + "---|" * lead + "---:|" * 6 + "---|"]
    out += ["| " + " | ".join(r) + " |" for r in rows(result)]
    out.append("")
    out += [f"<sub>{line}</sub>  " for line in footer_lines(result)]
    for g in result.get("gates", []):
        out.append(f"- **{gate_status(g)}** ({g['case']}): `{g['gate']}` — {g['arm']} vs "
                   f"{g['baseline']}")
    return "\n".join(out) + "\n"


def render_terminal(result: dict, console=None) -> None:
    """The table at the console's width through explore.termtable (a cell is never cut: columns
    that do not fit go to a second block under the first, the case labels repeated; rich's table
    cut them, `+24.3…`), then the footer wrapped at spaces."""
    from rich.console import Console

    from ..explore.termtable import Column, table, wrap

    console = console or Console()
    cols = console.width
    lead = 3 if _many(result) else 2
    columns = [Column(h, "right" if lead <= i < lead + 6 else "left") for i, h in enumerate(header(result))]
    lines = table(columns, rows(result), cols, labels=lead, title=f"clef-prof bench: {' → '.join(result['arms'])}")
    for line in footer_lines(result):
        lines += wrap(line, cols, "  ")
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
