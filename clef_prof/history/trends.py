"""Trends over the store: each metric's series, its change points with their magnitude and commit
range, and the CI gate "the newest results start a new change point".

A series is one metric of one kind of result (analyze, compare, bench) and one `series` label
(an arm, a bench case), in time order, its newest `last` points. Its change points:

- **exact** counts (every point an exact count: 9 H2D copies per request): every change of value
  is a change point, with no statistics;
- **noisy** figures: e-divisive means (clef_prof.history.edivisive) on the logarithms of the values
  when all are positive (performance noise is multiplicative, and one slow run among twenty then
  weighs as a factor, not as an absolute gap that a permutation can place anywhere), else on
  the values; seeded.

Each change point has the level before and after it (the means of the segments it separates:
geometric on the log scale, so that the change in % is the interval's centre),
the change in % and, for noisy series with 2 points a side, Welch's interval of the change
between the two segments (compare.welch; on the log scale as compare's; it does not allow for the
search that placed the split, so docs/history.md gives its coverage measured on detected changes),
and the commit range it falls in (the last result before, the first after: `git log A..B`).

The gate: a change point found in the whole series and absent (no change point within one
point of it) from the same analysis without the newest results, which are the results of the
newest commit (the newest result when results carry no commit). A series of exact counts fires
when the newest results differ from the one before them. Under a series without change the
first split of e-divisive is accepted with probability at most its level, so a series' false-alarm
rate is at most the level (exact for exchangeable noise, measured lower: docs/history.md), and a
family of k series at most k x the level (Bonferroni), which the gate says.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from . import edivisive
from .figures import higher_is_better
from .store import Row

SIG_LEVEL = 0.01          # clef-prof's default level per series (e.divisive's is 0.05: 1 series in 20 shows a
                          # change that is not there, too many for a report of 30 series)
LAST = 100                # the newest points of each series analysed
MIN_GATE = 8              # points a noisy series needs before the gate judges it
SCHEMA = "clef-prof/history-report/1"


def permutations_for(sig_level: float) -> int:
    """Permutations per test: 10 / level - 1 (199 at 0.05, 999 at 0.01), so that a change is
    accepted with up to 9 permutations beyond it, as e.divisive's defaults allow."""
    return max(199, int(round(10.0 / sig_level)) - 1)


@dataclass
class Point:
    id: int
    time: str
    commit: str | None
    branch: str | None
    host: str | None
    value: float


@dataclass
class Change:
    """A change point: `index` is the first point after it (into the series' points)."""

    index: int
    before: float
    after: float
    change: float
    change_pct: float | None
    ci: list[float] | None
    ci_pct: list[float] | None
    p: float | None                  # the permutation p-value; None for an exact change
    exact: bool
    direction: str                   # "up" | "down"
    regression: bool
    from_id: int
    to_id: int
    from_commit: str | None
    to_commit: str | None
    from_time: str
    to_time: str
    new: bool = False

    @property
    def commit_range(self) -> str:
        a, b = (c[:12] if c else "?" for c in (self.from_commit, self.to_commit))
        return f"{a}..{b}"


@dataclass
class Series:
    kind: str
    series: str
    metric: str
    unit: str
    exact: bool
    scale: str                       # "exact", "log" or "linear"
    points: list[Point]
    changes: list[Change]
    dropped: int = 0                 # older points beyond `last`

    @property
    def name(self) -> str:
        qual = " ".join(x for x in (self.kind if self.kind != "analyze" else "", self.series) if x)
        return f"{self.metric} [{qual}]" if qual else self.metric

    @property
    def values(self) -> np.ndarray:
        return np.array([p.value for p in self.points], dtype=np.float64)


@dataclass
class GateLine:
    series: str
    fired: bool
    judged: bool
    change: Change | None
    points: int
    why: str


@dataclass
class Gate:
    metrics: list[str]
    lines: list[GateLine]
    family: int
    level: float
    family_bound: float
    newest_commit: str | None

    @property
    def fired(self) -> bool:
        return any(g.fired for g in self.lines)

    @property
    def unjudged(self) -> bool:
        return any(not g.judged for g in self.lines)


@dataclass
class History:
    path: str
    results: int
    filters: dict
    method: dict
    series: list[Series]
    gate: Gate | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        def ch(c: Change) -> dict:
            d = asdict(c)
            d["commit_range"] = c.commit_range
            return d

        out = {"schema": SCHEMA, "store": self.path, "results": self.results, "filters": self.filters,
               "method": self.method,
               "series": [{"name": s.name, "kind": s.kind, "series": s.series, "metric": s.metric, "unit": s.unit,
                           "exact": s.exact, "scale": s.scale, "dropped": s.dropped,
                           "points": [asdict(p) for p in s.points], "changes": [ch(c) for c in s.changes]}
                          for s in self.series],
               "gate": None, "notes": self.notes}
        if self.gate is not None:
            g = self.gate
            out["gate"] = {"metrics": g.metrics, "family": g.family, "level": g.level, "family_bound": g.family_bound,
                           "newest_commit": g.newest_commit, "fired": g.fired,
                           "lines": [{"series": ln.series, "fired": ln.fired, "judged": ln.judged, "points": ln.points,
                                      "why": ln.why, "change": ch(ln.change) if ln.change else None}
                                     for ln in g.lines]}
        return out


# ---------------------------------------------------------------------------------------------


def group(rows: list[Row], last: int = LAST, metrics: list[str] | None = None) -> list[Series]:
    """The series of `rows` (in time order), each its newest `last` points; `metrics`: glob
    patterns of the metrics kept (all when None)."""
    by: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        if metrics and not any(fnmatch.fnmatchcase(r.metric, m) for m in metrics):
            continue
        by.setdefault((r.kind, r.series, r.metric), []).append(r)
    out = []
    for (kind, series, metric), rs in by.items():
        kept = rs[-last:] if last else rs
        pts = [Point(r.id, r.time, r.commit, r.branch, r.host, r.value) for r in kept]
        exact = all(r.exact for r in kept)
        vals = np.array([p.value for p in pts])
        scale = "exact" if exact else "log" if (vals > 0).all() else "linear"
        out.append(Series(kind, series, metric, kept[-1].unit, exact, scale, pts, [], len(rs) - len(kept)))
    return out


def _change(s: Series, i: int, lo: int, hi: int, p: float | None, confidence: float) -> Change:
    """The change point before point `i`, between segments [lo, i) and [i, hi)."""
    v = s.values
    a, b = v[lo:i], v[i:hi]
    level = (lambda x: float(np.exp(np.log(x).mean()))) if s.scale == "log" else (lambda x: float(x.mean()))
    before, after = level(a), level(b)
    pct = 100.0 * (after - before) / abs(before) if before != 0 else None
    ci = ci_pct = None
    if not s.exact and len(a) >= 2 and len(b) >= 2:
        from ..compare.welch import unit_interval

        iv = unit_interval(a, b, confidence)
        if np.isfinite(iv.lo) and np.isfinite(iv.hi):
            lo_pct, hi_pct, _ = iv.pct(before)
            lo_abs, hi_abs, _ = iv.absolute(before)
            ci, ci_pct = [float(lo_abs), float(hi_abs)], [float(lo_pct), float(hi_pct)]
    up = after > before
    pa, pb = s.points[i - 1], s.points[i]
    return Change(i, before, after, after - before, pct, ci, ci_pct, p, s.exact, "up" if up else "down",
                  up != higher_is_better(s.metric), pa.id, pb.id, pa.commit, pb.commit, pa.time, pb.time)


def _splits(s: Series, n: int, sig_level: float, seed: int) -> list[tuple[int, float | None]]:
    """(index, p) of the change points of the first `n` points of `s`."""
    v = s.values[:n]
    if s.exact:
        return [(int(i), None) for i in np.flatnonzero(v[1:] != v[:-1]) + 1]
    z = np.log(v) if s.scale == "log" else v
    return [(c.index, c.p) for c in edivisive.e_divisive(z, sig_level, permutations_for(sig_level), seed=seed)]


def detect(s: Series, sig_level: float = SIG_LEVEL, seed: int = 0, confidence: float = 0.95) -> None:
    """Fill `s.changes`."""
    cuts = _splits(s, len(s.points), sig_level, seed)
    idx = [i for i, _ in cuts]
    bounds = [0, *idx, len(s.points)]
    s.changes = [_change(s, i, bounds[k], bounds[k + 2], p, confidence) for k, (i, p) in enumerate(cuts)]


def newest_block(points: list[Point]) -> int:
    """How many of the newest points are the newest results: those of the newest point's commit
    (the newest point alone when it names none)."""
    c = points[-1].commit
    if c is None:
        return 1
    k = 0
    for p in reversed(points):
        if p.commit != c:
            break
        k += 1
    return k


def gate(series: list[Series], metrics: list[str], sig_level: float = SIG_LEVEL, seed: int = 0) -> Gate:
    """The gate over the series whose metric matches one of `metrics` (glob patterns); each
    series' change points must already be detected."""
    chosen = [s for s in series if any(fnmatch.fnmatchcase(s.metric, m) for m in metrics)]
    lines = []
    for s in chosen:
        n = len(s.points)
        k = newest_block(s.points)
        need = 2 if s.exact else MIN_GATE
        if n - k < 1 or n < need:
            lines.append(GateLine(s.name, False, False, None, n,
                                  f"{n} result(s): at least {need} are needed, one of them before the newest commit"))
            continue
        if s.exact:
            new = [c for c in s.changes if c.index >= n - k]
        else:
            old = [i for i, _ in _splits(s, n - k, sig_level, seed)]
            new = [c for c in s.changes if not any(abs(c.index - j) <= 1 for j in old)]
        for c in new:
            c.new = True
        first = new[-1] if new else None
        why = "new change point" if first else "no new change point"
        lines.append(GateLine(s.name, bool(new), True, first, n, why))
    fam = sum(1 for ln in lines if ln.judged and not _exact_name(series, ln.series))
    newest = max((s.points[-1] for s in chosen), key=lambda p: (p.time, p.id)).commit if chosen else None
    return Gate(list(metrics), lines, fam, sig_level, min(1.0, fam * sig_level), newest)


def _exact_name(series: list[Series], name: str) -> bool:
    return any(s.name == name and s.exact for s in series)


def analyse(path: str, rows: list[Row], results: int, *, last: int = LAST, metrics: list[str] | None = None,
            sig_level: float = SIG_LEVEL, seed: int = 0, gate_metrics: list[str] | None = None,
            filters: dict | None = None, confidence: float = 0.95) -> History:
    """The trends of a store's rows, and the gate when `gate_metrics` names metrics."""
    wanted = [*(metrics or []), *(gate_metrics or [])] or None     # the gate alone shows its series only
    series = group(rows, last, wanted)
    series.sort(key=lambda s: (s.kind, s.series, _order(s.metric), s.metric))
    for s in series:
        detect(s, sig_level, seed, confidence)
    h = History(path, results, filters or {}, {
        "method": "e-divisive means (Matteson & James 2014) on log values where all are positive; exact counts: "
                  "any change of value", "sig_level": sig_level, "permutations": permutations_for(sig_level),
        "min_size": edivisive.MIN_SIZE, "alpha": edivisive.ALPHA, "seed": seed, "last": last,
        "confidence": confidence}, series)
    if gate_metrics:
        h.gate = gate(series, gate_metrics, sig_level, seed)
    return h


_ORDER = ("per_request.pooler_host_ms", "stages.", "pooler.", "per_request.", "overlap.", "throughput", "goodput",
          "latency")


def _order(metric: str) -> int:
    return next((i for i, p in enumerate(_ORDER) if metric.startswith(p)), len(_ORDER))


def fmt(v: float | None, unit: str = "") -> str:
    """A figure in 4 significant digits (a count or bytes as a whole number when it is one)."""
    if v is None or not math.isfinite(v):
        return "-"
    if unit == "fraction":
        return f"{100 * v:.1f}%"
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}" if a >= 1e-3 else f"{v:.3g}"
