"""`compare`'s engine: analyze the captures of each arm, refuse what cannot be compared, and put
every per-request metric of analyze side by side with an interval for the change.

Every metric is a ratio of sums over batch instances: sum(numerator) / sum(denominator) per arm,
e.g. `stages.transfer.host_ms_per_request` = sum(transfer ns) / sum(batch size) / 1e6, which is
exactly analyze's figure for one capture and the pooled figure for several.

A capture is the unit that varies from run to run. The verdict comes from the per-capture values
of the metric (each capture's own ratio of sums): Welch's t interval between the arms (`welch`;
on logs where every value is positive, else on the values), from 3 captures per arm; below that
the verdict is "too few captures to judge". Every metric also carries the within-capture
bootstrap interval (`resample`: batch instances resampled within each capture, captures kept),
labelled so: it covers the batch-to-batch noise of the recorded runs, not run-to-run variation.
A count that is the same multiple of the batch size in every batch of every capture of an arm
(9 H2D copies per request, 15 head launches per request) is deterministic in that arm; when it
is so in every arm the figures are exact and carry no interval.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .arm import Arms, CaptureRef, CompareError
from ..analyze.read.columns import Table
from ..analyze.read.filecache import FileCache
from ..analyze.figures.metrics import BATCH_KEYS, NS_PER_MS, check_name_lengths, check_stage_names
from ..analyze.model import Result
from ..analyze.judge.findings import compare_findings
from ..analyze.figures.samples import StackCounts
from ..analyze.figures.stages import StageConfig

SCHEMA = "clef-prof/compare/1"
CUDA_KEYS = ("h2d_copies", "h2d_bytes", "d2h_copies", "kernel_launches", "graph_launches")


@dataclass(frozen=True)
class Metric:
    name: str           # dotted path in analyze's JSON
    kind: str           # host_ms | gpu_ms | count | bytes | fraction
    num: str            # per-batch column summed in the numerator
    den: str            # ... and in the denominator
    scale: float = 1.0
    cuda: bool = False
    stage: str | None = None

    @property
    def unit(self) -> str:
        return {"host_ms": "ms/request", "gpu_ms": "ms/request", "count": "/request", "bytes": "B/request",
                "fraction": "fraction of the batch host span"}[self.kind]


def catalogue(stages: tuple[str, ...], cuda: bool) -> list[Metric]:
    """The metrics compare reports, in display order."""
    out = [Metric("per_request.pooler_host_ms", "host_ms", "host_ns", "size", 1 / NS_PER_MS)]
    out += [Metric(f"stages.{s}.host_ms_per_request", "host_ms", f"stage:{s}:ns", "size", 1 / NS_PER_MS, stage=s)
            for s in stages]
    if not cuda:
        return out
    kinds = {"h2d_bytes": "bytes"}
    out += [Metric(f"per_request.{k}", kinds.get(k, "count"), k, "size", cuda=True) for k in CUDA_KEYS]
    out += [Metric(f"stages.{s}.{k}_per_request", kinds.get(k, "count"), f"stage:{s}:{k}", "size", cuda=True, stage=s)
            for s in stages for k in CUDA_KEYS]
    # summed per batch (each batch's GPU busy within its own span), so named as analyze names that
    # definition: with concurrent batches it differs from the per-capture union figure
    out += [Metric("overlap.gpu_busy_fraction_of_batch_spans", "fraction", "gpu_busy_ns", "host_ns", cuda=True),
            Metric("overlap.gpu_busy_ms_in_batch_spans_per_request", "gpu_ms", "gpu_busy_ns", "size", 1 / NS_PER_MS,
                   cuda=True),
            Metric("per_request.gpu_busy_ms", "gpu_ms", "gpu_own_ns", "size", 1 / NS_PER_MS, cuda=True)]
    return out


# other dotted paths of analyze's JSON that hold the same figure
ALIASES = {"pooler.host_ms_per_request": "per_request.pooler_host_ms",
           "overlap.gpu_busy_ms_per_request": "per_request.gpu_busy_ms",
           **{f"pooler.{k}_per_request": f"per_request.{k}" for k in CUDA_KEYS}}


def known_names(stages: tuple[str, ...]) -> dict[str, str]:
    """Every metric name (and alias) a gate may use -> its canonical name."""
    names = {m.name: m.name for m in catalogue(stages, cuda=True)}
    names.update(ALIASES)
    return names


# ---------------------------------------------------------------------------------------------
# one capture


@dataclass
class CaptureData:
    """What compare keeps of one analyzed capture: analyze's result, the per-batch table and its
    Python samples per (stage, stack) when it has any."""

    export: str
    result: Result = field(repr=False)
    table: Table = field(repr=False)   # one row per batch: size, host_ns, stage:<s>:ns, ...
    samples: StackCounts | None = field(default=None, repr=False)


def batch_table(a) -> Table:
    """compare's per-batch table, from analyze's (`Analysis.batch_table`): size, host ns of the
    batch and of each stage, and with CUDA trace the CUDA work of the batch and of each stage in it,
    the GPU busy ns in its host span and the busy ns of its own work (`gpu_own_ns`).

    Stage instances outside every batch range (per-request parse or encode on an event loop) are
    rows of their own after the batches (`outside` 1, size 0, no batch host time), so that every
    per-request figure is analyze's (the stage's whole time over the capture's requests) and the
    within-capture bootstrap resamples them as units too. Their CUDA work, which analyze counts
    per stage and not per instance, is spread evenly over the stage's outside rows."""
    pb = a.batch_table
    stages = a.config.stages
    cuda = a.result.capture.cuda_traced
    inst = a.stages.instances
    loose = inst[inst["batch"] < 0]
    n_b, n_o = len(pb), len(loose)

    def col(batch_part, outside_part=None):
        out = np.zeros(n_b + n_o, dtype=np.float64 if outside_part is not None and
                       np.asarray(outside_part).dtype.kind == "f" else np.int64)
        out[:n_b] = batch_part
        if outside_part is not None:
            out[n_b:] = outside_part
        return out

    cols = {"size": col(pb["size"]), "host_ns": col(pb["host_ns"]), "outside": col(0, 1)}
    for code, s in enumerate(stages):
        mine = loose["code"] == code
        cols[f"stage:{s}:ns"] = col(pb[f"{s}_ns"], np.where(mine, loose["end"] - loose["start"], 0))
    if cuda:
        for k in (*CUDA_KEYS, "gpu_busy_ns", "gpu_own_ns"):
            cols[k] = col(pb[k])
        for code, s in enumerate(stages):
            mine = loose["code"] == code
            figures = a.result.stages[s].cuda
            for k in BATCH_KEYS:
                rest = int(getattr(figures, k, 0) or 0) - int(np.asarray(pb[f"{s}_{k}"]).sum())
                share = np.where(mine, rest / max(int(mine.sum()), 1), 0.0) if rest > 0 and mine.any() else None
                cols[f"stage:{s}:{k}"] = col(pb[f"{s}_{k}"], share)
                if share is not None and k in cols:       # analyze's per-request totals hold it too
                    cols[k] = cols[k] + share
    return Table(cols)


def load_capture(export: str, config: StageConfig) -> CaptureData:
    """Analyze one export (module level, so that worker processes can run it)."""
    from ..analyze.pipeline import analyze

    a = analyze(export, config)
    return CaptureData(export, a.result, batch_table(a), a.sample_counts)


_CACHE = FileCache(16)


def load_all(arms: Arms, config: StageConfig, jobs: int | None = None) -> dict[str, list[CaptureData]]:
    """Analyze every distinct export once, in worker processes as `analyze` does with several
    captures (`analyze.parallel.map_captures`: `jobs` None = one per two CPUs, at most one per
    capture, none below 64 MB of input); results are kept per file (`FileCache`)."""
    from ..analyze.parallel import map_captures

    check_stage_names(tuple(config.stages))
    check_name_lengths(config)
    first: dict[str, str] = {}                      # real path -> the path analyzed for it
    for refs in arms.captures.values():
        for r in refs:
            first.setdefault(os.path.realpath(r.export), r.export)
    done: dict[str, CaptureData] = {}
    todo = []
    for real, e in first.items():
        hit = _CACHE.get(_CACHE.key(e, config))
        if hit is not None:
            done[real] = hit
        else:
            todo.append((real, e))
    loaded = map_captures(load_capture, [e for _, e in todo], (config,), jobs=jobs)
    for (real, e), d in zip(todo, loaded):
        done[real] = d
        _CACHE.put(_CACHE.key(e, config), d)
    return {name: [done[os.path.realpath(r.export)] for r in refs] for name, refs in arms.captures.items()}


# ---------------------------------------------------------------------------------------------
# refusal


def check_comparable(arms: Arms, data: dict[str, list[CaptureData]], stages: tuple[str, ...]) -> list[Metric]:
    """The metrics all captures share, or CompareError with the reason they cannot be compared."""
    flat: list[tuple[str, CaptureRef, CaptureData]] = [
        (name, ref, d) for name in arms.names for ref, d in zip(arms.captures[name], data[name])]

    def who(name, ref):
        return f"{name} ({ref.label})"

    for name, ref, d in flat:
        r = d.result
        if r.batches == 0 or r.requests_source is None or (d.table["size"] < 0).any():
            raise CompareError(f"cannot compare: {who(name, ref)} has no {r.config.batch!r} batch ranges with "
                               "a size (n=K): per-request figures need batch sizes (run `clef-prof analyze` on it)")

    present = [(name, ref, frozenset(s for s in stages if d.result.stages[s].instances > 0))
               for name, ref, d in flat]
    base_name, base_ref, base_set = present[0]
    for name, ref, have in present[1:]:
        if have != base_set:
            only_a, only_b = sorted(base_set - have, key=stages.index), sorted(have - base_set, key=stages.index)
            parts = []
            if only_a:
                parts.append(f"{', '.join(only_a)} only in {who(base_name, base_ref)}")
            if only_b:
                parts.append(f"{', '.join(only_b)} only in {who(name, ref)}")
            raise CompareError(f"cannot compare: different stage names ({'; '.join(parts)}); compare captures "
                               "annotated alike, or pass --stages with the names they share")

    traced = [(name, ref, d.result.capture.cuda_traced) for name, ref, d in flat]
    if len({t for _, _, t in traced}) > 1:
        on = next((n, r) for n, r, t in traced if t)
        off, why = next(((n, r), d.result.warnings) for n, r, d in flat if not d.result.capture.cuda_traced)
        from ..analyze.judge.validate import FIGURES_HIDDEN
        why = next((w[:-len(FIGURES_HIDDEN)].rstrip(": ") for w in why if w.endswith(FIGURES_HIDDEN)), "no CUDA rows")
        raise CompareError(f"cannot compare: {who(*on)} has CUDA records, {who(*off)} none ({why}): no CUDA metrics "
                           "in common, and CUDA tracing adds host time to every API call, so host times differ too; "
                           "record both with the same `nsys -t` options on machines alike")
    modes = [(name, ref, d.result.capture.graph_trace_mode) for name, ref, d in flat]
    if traced[0][2] and len({m for _, _, m in modes}) > 1:
        a = modes[0]
        b = next(m for m in modes if m[2] != a[2])
        raise CompareError(f"cannot compare: different CUDA graph-trace modes ({a[2]} in {who(a[0], a[1])}, {b[2]} in "
                           f"{who(b[0], b[1])}): graph kernels and launch costs are counted differently; record both "
                           "with the same --cuda-graph-trace")

    metrics = [m for m in catalogue(stages, traced[0][2]) if m.stage is None or m.stage in base_set]
    if not metrics:
        raise CompareError("cannot compare: the captures have no metric in common")
    return metrics


# ---------------------------------------------------------------------------------------------
# the comparison


def _capture_warnings(ref: CaptureRef, d: CaptureData) -> list[str]:
    """analyze's warnings, and the record manifest's check where the capture has a manifest."""
    out = list(d.result.warnings)
    try:
        from ..analyze.judge import manifest as held
        from ..analyze.read import manifest as mf
    except ImportError:         # record's manifest module absent: analyze's warnings only
        return out
    data = ref.manifest
    if data is None:
        path = mf.find_for(d.export)
        try:
            data = mf.read(path) if path else None
        except (OSError, ValueError):
            data = None
    if data:
        out += [w for w in held.check_manifest(d.result, data) if w not in out]
    return out


def _exact_multiple(num: np.ndarray, den: np.ndarray) -> float | None:
    """k when num == k * den in every batch (one k for all), else None."""
    pos = den > 0
    if (num[~pos] != 0).any() or not pos.any():
        return None
    r = num[pos] / den[pos]
    k = r[0]
    if np.all(np.abs(r - k) <= 1e-12 * max(abs(k), 1e-300)):
        return float(num.sum() / den.sum())
    return None


def capture_values(num: np.ndarray, den: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """A capture's figure of a metric: Σ numerator / Σ denominator over its batches (the last
    axis) times the metric's scale: the unit value of compare's verdict."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return num.sum(-1) / den.sum(-1) * scale


def _pct(change: float | None, base: float | None) -> float | None:
    if change is None or base is None:
        return None
    if base == 0:
        return 0.0 if change == 0 else None
    return 100.0 * change / base


def compare(arms: Arms, data: dict[str, list[CaptureData]], config: StageConfig = StageConfig(), n_boot: int = 2000,
            seed: int = 0, confidence: float = 0.95, family: str = "none") -> dict:
    """The comparison as the JSON contract (docs/json.md, compare). family: "none" (each figure
    judged on its own, the family's rate stated) or "holm" (`family.apply_family`)."""
    from . import welch
    from .functions import verdict_fields
    from .resample import arm_rngs, percentile_interval, ratio, resampled_sums_of_arms

    stages = tuple(config.stages)
    metrics = check_comparable(arms, data, stages)
    names = arms.names
    base = names[0]
    columns = sorted({c for m in metrics for c in (m.num, m.den)})
    col = {c: i for i, c in enumerate(columns)}

    # (a table is a Table or any mapping of column name to array, e.g. a DataFrame)
    blocks = {n: [np.column_stack([np.asarray(d.table[c]) for c in columns]).astype(np.float64) for d in data[n]]
              for n in names}
    pooled = {n: np.concatenate(blocks[n]) for n in names}
    ints = {n: {c: np.concatenate([np.asarray(d.table[c]) for d in data[n]]) for c in columns} for n in names}
    # rows of stage instances outside every batch (batch_table): not batches
    outside = {n: np.concatenate([np.asarray(d.table["outside"]) if "outside" in d.table else
                                  np.zeros(len(np.asarray(d.table["size"])), np.int64) for d in data[n]]) > 0
               for n in names}
    rngs = arm_rngs(seed, len(names))
    boot = dict(zip(names, resampled_sums_of_arms(rngs, [blocks[n] for n in names], n_boot)))

    arms_out = {}
    for n in names:
        rs = [d.result for d in data[n]]
        arms_out[n] = {"captures": len(rs), "batches": int(sum(r.batches for r in rs)),
                       "requests": int(sum(r.requests for r in rs)),
                       "exports": [d.export for d in data[n]],
                       "sources": [ref.source for ref in arms.captures[n]],
                       "nsys_versions": sorted({r.capture.nsys_version or "?" for r in rs})}

    out_metrics = []
    for m in metrics:
        i_num, i_den = col[m.num], col[m.den]
        entry = {"metric": m.name, "kind": m.kind, "unit": m.unit, "arms": {}}
        exact = {}
        est = {}
        for n in names:
            x = pooled[n]
            mean = float(x[:, i_num].sum() / x[:, i_den].sum() * m.scale)
            k = None
            if m.kind in ("count", "bytes"):
                k = _exact_multiple(ints[n][m.num], ints[n][m.den])
                if k is not None:
                    mean = k
            exact[n] = k is not None
            a = {"mean": mean, "captures": len(blocks[n]), "instances": int((~outside[n]).sum()),
                 "per_capture": [float(capture_values(b[:, i_num], b[:, i_den], m.scale)) if b[:, i_den].sum() else None
                                 for b in blocks[n]]}
            if m.kind == "host_ms":
                # per batch, and per instance outside every batch (analyze's host_ms_p50)
                rows = ~outside[n] if m.stage is None else x[:, i_num] > 0
                per_batch_ms = x[rows if rows.any() else ~outside[n], i_num] / NS_PER_MS
                a["p50"] = float(np.percentile(per_batch_ms, 50))
                a["p99"] = float(np.percentile(per_batch_ms, 99))
            entry["arms"][n] = a
            est[n] = ratio(boot[n], i_num, i_den, m.scale)
        deterministic = all(exact.values())
        entry["deterministic"] = deterministic
        b_mean = entry["arms"][base]["mean"]
        for n in names[1:]:
            change = entry["arms"][n]["mean"] - b_mean
            a = entry["arms"][n]
            a.update({"change": change, "change_pct": _pct(change, b_mean), "ci": None, "ci_pct": None,
                      "ci_within": None, "ci_within_pct": None, "scale": None, "df": None, "se": None, "p": None, "mdc": None,
                      "mdc_pct": None, "beyond_noise": change != 0 if deterministic else False})
            if deterministic:
                a["verdict"] = "exact change" if change != 0 else "exact"
                continue
            ci = percentile_interval(est[n] - est[base], confidence)
            with np.errstate(divide="ignore", invalid="ignore"):
                ci_pct = percentile_interval(100.0 * (est[n] / est[base] - 1.0), confidence)
            a.update({"ci_within": None if ci is None else list(ci), "ci_within_pct": None if ci_pct is None
                      else list(ci_pct)})
            units = [[v for v in entry["arms"][x]["per_capture"] if v is not None] for x in (base, n)]
            a.update(verdict_fields(units[0], units[1], b_mean, confidence))
        first = entry["arms"][names[1]]
        entry.update({k: first[k] for k in ("change", "change_pct", "ci", "ci_pct", "beyond_noise", "verdict",
                                            "ci_within", "ci_within_pct", "mdc", "mdc_pct")})
        out_metrics.append(entry)

    warnings = [f"{n} ({ref.label}): {w}" for n in names for ref, d in zip(arms.captures[n], data[n])
                for w in _capture_warnings(ref, d)]
    from .functions import function_changes
    functions, function_notes = function_changes(names, data, tuple(s for s in stages if any(
        m.stage == s for m in metrics)), confidence)
    from .family import apply_family
    fam = {}
    for n in names[1:]:
        rows = [m["arms"][n] for m in out_metrics if not m["deterministic"]]
        rows += [e["arms"][n] for st in (functions or {}).get("stages", {}).values() for e in st["functions"]]
        fam[n] = apply_family(rows, family, confidence)
    keys = ("beyond_noise", "verdict", "p", "p_family")
    for m in out_metrics + [e for st in (functions or {}).get("stages", {}).values() for e in st["functions"]]:
        m.update({k: m["arms"][names[1]][k] for k in keys if k in m["arms"][names[1]]})
    notes = list(arms.notes) + function_notes
    versions = sorted({v for a in arms_out.values() for v in a["nsys_versions"]})
    if len(versions) > 1:
        notes.append(f"captures from different nsys versions ({', '.join(versions)}): profiler overhead may differ, "
                     "so part of a host-time change may be the profiler's")
    missing = [s for s in stages if not any(m.stage == s for m in metrics)]
    if missing:
        notes.append(f"no range in any capture for stage(s) {', '.join(missing)}: not compared")
    for n in names:
        loose = sum(d.result.excluded.outside_batch_instances for d in data[n])
        if loose:
            notes.append(f"{n}: {loose} stage instances lie outside batch ranges: compared per request with the "
                         "rest, as analyze reports them (each one a unit of the within-capture bootstrap)")
    return {
        "schema": SCHEMA,
        "baseline": base,
        "arms": arms_out,
        "method": {"interval": "Welch t between the arms' per-capture values (each capture's sum(numerator) / "
                               "sum(denominator); on logs where every value is positive, reported as exp(CI) - 1; "
                               f"Satterthwaite df); no verdict below {welch.MIN_UNITS} captures per arm; mdc: the "
                               "the change found 80% of the time, its spread being measured (noncentral t; none below 3 per arm)",
                   "min_captures": welch.MIN_UNITS,
                   "bootstrap": "within-capture percentile bootstrap (batch instances resampled within each capture, "
                                "captures kept): ci_within, batch noise of these runs only",
                   "B": n_boot, "seed": seed, "confidence": confidence, "family": family,
                   "exact": "a count that is one multiple of the batch size in every batch of every capture of "
                            "every arm is exact: no interval"},
        "config": {"domain": config.domain, "batch": config.batch, "stages": list(stages)},
        "metrics": out_metrics,
        "findings": compare_findings({n: [d.result for d in data[n]] for n in names}, base),
        "functions": functions,
        "family": fam,
        "warnings": warnings,
        "notes": notes,
    }
