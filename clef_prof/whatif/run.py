"""`clef-prof whatif`'s experiment: fresh unprofiled servers, each with one stage slowed by a known
amount (annotate.delay), in bench's balanced order, turned into one `Observation` per server.

The design: a baseline arm (level 0: every named stage wrapped with `0us`, so that each server pays
the same wrapping cost) and, per stage and non-zero level, an arm whose $CLEF_PROF_DELAY adds that
level to that stage (the others still at `0us`). `--servers` rounds of every arm run through
`bench.run` (ABBA order across rounds, warm-up, windows, parity, process handling), keeping going
past a server that fails. Each server writes its stage counters into its own folder
($CLEF_PROF_DELAY_STATS, every 0.05 s); they are read while the server is idle just before its
first window and just after its last one drained, so their difference counts exactly the stage
calls of the windows' requests: added ms per request = injected ns / completed requests.

The first baseline server that answers is checked before any delayed one runs: a stage with no
call there is unknown (named, with the stages the server did run), and a level that would leave
fewer than MIN_WINDOW_REQUESTS requests in a window, were the stage on the critical path, is
refused.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

from ..annotate import delay as dl
from ..bench.run import BenchError, Hooks, cases_from
from ..bench.run import run as bench_run
from ..base.errors import ClefError
from .model import Observation, WhatIf
from .slopes import analyse

MIN_WINDOW_REQUESTS = 20        # a window with fewer requests than this gives no usable figure
STATS_PERIOD_S = 0.05           # how often a server writes its counters
SNAPSHOT_TIMEOUT_S = 3.0        # how long to wait for every process's counters after an idle point
BASELINE = "0"

_LEVEL = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|µs|ms|%)?\s*$")
_STAGE = re.compile(r"^[A-Za-z_][\w.:\-]*$")


class WhatIfError(ClefError):
    pass


@dataclass(frozen=True)
class Level:
    """A delay level: `value` µs per call (unit "us") or a fraction of the call's own time ("frac")."""
    value: float
    unit: str

    @property
    def amount(self) -> str:
        """As $CLEF_PROF_DELAY writes it."""
        return f"{_plain(self.value)}x" if self.unit == "frac" else f"{_plain(self.value)}us"

    @property
    def label(self) -> str:
        if self.unit == "frac":
            return f"{_plain(self.value * 100)}%"
        return f"{_plain(self.value / 1000)}ms" if self.value >= 1000 else f"{_plain(self.value)}us"


def _plain(v: float) -> str:
    """A number without an exponent (annotate.delay reads digits and a point only)."""
    return f"{v:.6f}".rstrip("0").rstrip(".")


def parse_levels(text: str) -> list[Level]:
    """`0,10%,25%` or `0,50us,100us` (also ms): 0 and at least two more, all in one unit."""
    out, units = [], set()
    for raw in text.split(","):
        if not raw.strip():
            continue
        m = _LEVEL.match(raw)
        if not m:
            raise WhatIfError(f"--levels {text!r}: {raw.strip()!r} is not a delay per call (50us, 0.2ms) or a "
                              "share of the stage's own time per call (25%)")
        v, u = float(m.group(1)), m.group(2)
        if u is not None and v > 0:
            units.add("frac" if u == "%" else "us")
        value = v / 100 if u == "%" else v * 1000 if u == "ms" else v
        out.append((value, u))
    if len(units) > 1:
        raise WhatIfError(f"--levels {text!r}: give every level in one unit, all in µs per call or all in % of "
                          "the stage's time")
    unit = units.pop() if units else "us"
    levels = sorted({v for v, _ in out})
    if 0 not in levels or len(levels) < 3:
        raise WhatIfError(f"--levels {text!r}: give 0 and at least two more levels, e.g. 0,10%,25% or "
                          "0,50us,100us")
    return [Level(v, unit) for v in levels]


def parse_stages(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise WhatIfError("--stages: name at least one stage, e.g. --stages head,transfer")
    for n in names:
        if not _STAGE.match(n):
            raise WhatIfError(f"--stages {text!r}: {n!r} is not a stage name")
    if len(set(names)) != len(names):
        raise WhatIfError(f"--stages {text!r}: a stage named twice")
    return names


def delay_spec(stages: list[str], mode: str, stage: str | None, level: Level | None) -> str:
    """Every stage at 0us (timed, nothing added) except `stage`, at `level` in `mode`."""
    return ",".join(f"{s}={mode}:{level.amount if s == stage and level else '0us'}" for s in stages)


def design(stages: list[str], levels: list[Level]) -> list[tuple[str, str | None, Level | None]]:
    """The arms: (name, stage, level), the baseline first."""
    return [(BASELINE, None, None)] + [(f"{s}+{lv.label}", s, lv) for s in stages for lv in levels if lv.value]


# --------------------------------------------------------------------------------------------
# a server's counters


def read_counters(folder: str) -> dict[int, dict] | None:
    """Every process's last stats file in `folder` ({pid: document}); None when there is none."""
    out = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("schema") == dl.SCHEMA:
            out[int(doc.get("pid", 0))] = doc
    return out or None


def snapshot(folder: str, timeout: float = SNAPSHOT_TIMEOUT_S) -> dict | None:
    """The counters written after now (the server being idle): wait until every process's file is
    newer, at most `timeout` (a process that ended keeps its last file)."""
    t0 = time.time_ns()
    end = time.monotonic() + timeout
    while True:
        docs = read_counters(folder)
        if docs and all(d.get("time_ns", 0) >= t0 for d in docs.values()) or time.monotonic() > end:
            return docs
        time.sleep(STATS_PERIOD_S / 2)


def totals(docs: dict | None) -> tuple[dict[str, list[int]], set[str]]:
    """{stage: [calls, own ns, injected ns]} summed over processes, and every stage name made."""
    out: dict[str, list[int]] = {}
    seen: set[str] = set()
    for d in (docs or {}).values():
        seen.update(d.get("stages_seen") or [])
        for name, row in (d.get("stages") or {}).items():
            t = out.setdefault(name, [0, 0, 0])
            t[0] += int(row.get("calls", 0))
            t[1] += int(row.get("own_ns", 0))
            t[2] += int(row.get("injected_ns", 0))
    return out, seen


def difference(before: dict | None, after: dict | None) -> dict[str, list[int]]:
    a, _ = totals(after)
    b, _ = totals(before)
    return {k: [x - y for x, y in zip(v, b.get(k, [0, 0, 0]))] for k, v in a.items()}


# --------------------------------------------------------------------------------------------
# the run


class _Hooks(Hooks):
    def __init__(self, args, arms: dict, stages: list[str], folder: str):
        self.args, self.arms, self.stages, self.folder = args, arms, stages, folder
        self.before: dict[int, dict | None] = {}
        self.after: dict[int, dict | None] = {}
        self.checked = False
        self.windows: dict[int, list[dict]] = {}

    def stats_dir(self, seq: int) -> str:
        return os.path.join(self.folder, f"{seq:02d}")

    def env(self, seq: int, arm: str) -> dict[str, str]:
        stage, level = self.arms[arm]
        return {dl.ENV_DELAY: delay_spec(self.stages, self.args.mode, stage, level),
                dl.ENV_STATS: self.stats_dir(seq), dl.ENV_PERIOD: str(STATS_PERIOD_S)}

    def before_windows(self, meta: dict) -> None:
        self.before[meta["seq"]] = snapshot(self.stats_dir(meta["seq"]))

    def after_windows(self, meta: dict, windows: list[dict]) -> None:
        self.after[meta["seq"]] = snapshot(self.stats_dir(meta["seq"]))
        self.windows[meta["seq"]] = windows

    def after_server(self, meta: dict) -> None:
        if self.checked or meta["arm"] != BASELINE or meta.get("failed") or meta["seq"] not in self.after:
            return
        self.checked = True
        check_baseline(self.args, self.stages, self.arms, meta, self.before.get(meta["seq"]),
                       self.after[meta["seq"]], self.windows[meta["seq"]])


def check_baseline(args, stages, arms, meta, before, after, windows) -> None:
    """Unknown stages and levels too large for the window, from the first baseline server."""
    label = f"{meta['seq']:02d}-{BASELINE}-r{meta['round']}"
    if after is None:
        raise WhatIfError(f"the baseline server {label} wrote no stage counters: it does not run clef_prof's "
                          "stages (give --spec to inject them, or annotate the code with clef_prof.stage)")
    diff = difference(before, after)
    _, seen = totals(after)
    done = sum(w["completions"] for w in windows)
    for s in stages:
        if diff.get(s, [0])[0] <= 0:
            ran = sorted(n for n, v in diff.items() if v[0] > 0) or sorted(seen)
            raise WhatIfError(f"--stages {s}: no call of stage {s!r} recorded in the baseline server {label} "
                              f"(it ran {', '.join(ran) or 'no stage'}); check the name against the spec or code")
    if not done:
        return
    elapsed = sum(w["elapsed_s"] for w in windows)
    cycle_ms = 1000 * elapsed / done                        # ms per request at level 0
    for arm, (stage, level) in arms.items():
        if stage is None:
            continue
        calls, own, _ = diff[stage]
        per_call_ms = level.value / 1000 if level.unit == "us" else level.value * own / calls / 1e6
        added = per_call_ms * calls / done
        most = args.window_s * 1000 / (cycle_ms + added)
        if most < MIN_WINDOW_REQUESTS:
            raise WhatIfError(f"--levels: {stage} +{level.label} adds {added:.3g} ms per request ({calls / done:.3g} "
                              f"calls per request): on the critical path a {args.window_s:g} s window would hold "
                              f"{most:.0f} requests, fewer than {MIN_WINDOW_REQUESTS}; lower the level or raise "
                              "--window-s")


def precheck(args, levels: list[Level]) -> None:
    """Levels that no window or request timeout can hold, refused before any server starts."""
    for lv in levels:
        if lv.unit == "us" and lv.value / 1e6 >= min(args.window_s, args.request_timeout):
            which = "--window-s" if args.window_s <= args.request_timeout else "--request-timeout"
            raise WhatIfError(f"--levels: {lv.label} per call is longer than the {which} "
                              f"{min(args.window_s, args.request_timeout):g} s: no request would finish in it")


def run(args, command: list[str]) -> tuple[list[Observation], dict]:
    """Run the experiment; the observations (one per server, failed ones included) and the meta."""
    stages, levels = parse_stages(args.stages), parse_levels(args.levels)
    cases = cases_from(args)
    if len(cases) != 1:
        raise WhatIfError("whatif measures at one load: give one --concurrency, --words, --questions and --rate")
    if args.servers < 2:
        raise WhatIfError("--servers must be at least 2 (a slope's interval needs servers as units)")
    precheck(args, levels)
    if args.spec:
        if not os.path.isfile(args.spec):
            raise WhatIfError(f"--spec {args.spec}: no such file")
        command = [sys.executable, "-m", "clef_prof", "inject", "--spec", os.path.abspath(args.spec), "--", *command]
    plan = design(stages, levels)
    arms = {name: (stage, level) for name, stage, level in plan}
    folder = tempfile.mkdtemp(prefix="clef-prof-whatif-")
    hooks = _Hooks(args, arms, stages, folder)
    args.rounds, args.order, args.arm, args.cases = args.servers, "ABBA", [], None
    args.fail_if, args.gate_on = [], "ci"
    try:
        result = bench_run(args, arms=[(name, command) for name, _, _ in plan], hooks=hooks, keep_going=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    obs = [observation(meta, arms[meta["arm"]], stages, hooks.windows.get(meta["seq"], []),
                       hooks.before.get(meta["seq"]), hooks.after.get(meta["seq"]), args.slo_ms)
           for meta in result["servers"]]
    meta = {"command": command, "stages": stages, "levels": [lv.label for lv in levels], "mode": args.mode,
            "servers_per_level": args.servers, "load": result["cases"][0]["label"], "case": cases[0].as_dict(),
            "slo_ms": args.slo_ms, "method": result["method"], "notes": result["notes"],
            "duration_s": result["duration_s"]}
    return obs, meta


def observation(meta: dict, arm: tuple, stages: list[str], windows: list[dict], before, after,
                slo_ms: float | None) -> Observation:
    stage, level = arm
    unit = level.unit if level else "us"
    value = level.value if level else 0.0
    failed = meta.get("failed")
    done = sum(w["completions"] for w in windows)
    if failed is None and (after is None or not done):
        failed = "no stage counters from the server" if after is None else "no request completed in the windows"
    if failed is not None:
        return Observation(stage, value, unit, meta["seq"], 0.0, 0.0, 0.0, len(windows), {}, failed)
    diff = difference(before, after)
    per = {s: {"calls_per_request": diff.get(s, [0, 0, 0])[0] / done,
               "own_ms_per_request": diff.get(s, [0, 0, 0])[1] / 1e6 / done,
               "added_ms_per_request": diff.get(s, [0, 0, 0])[2] / 1e6 / done} for s in stages}
    elapsed = sum(w["elapsed_s"] for w in windows)
    metrics = {"throughput_rps": done / elapsed}
    for m, col in (("p50_ms", "latency_ms_p50"), ("p99_ms", "latency_ms_p99")):
        v = [w[col] for w in windows if w.get(col) is not None]
        if v:
            metrics[m] = sum(v) / len(v)
    if slo_ms is not None:
        metrics["goodput_rps"] = sum(w.get("good", 0) for w in windows) / elapsed
    own = per[stage or stages[0]]
    return Observation(stage, value, unit, meta["seq"], own["added_ms_per_request"] if stage else 0.0,
                       own["own_ms_per_request"], own["calls_per_request"], len(windows),
                       {k: v for k, v in metrics.items() if math.isfinite(v)}, None, per)


def analysis(observations: list[Observation], confidence: float = 0.95) -> WhatIf:
    """`analyse` per stage, each baseline server carrying that stage's own time (per_stage)."""
    ok = [o for o in observations if o.failed is None]
    stages = sorted({o.stage for o in ok if o.stage is not None})
    parts = []
    for s in stages:
        base = [dataclasses.replace(o, stage_ms_per_request=o.per_stage[s]["own_ms_per_request"],
                                    calls_per_request=o.per_stage[s]["calls_per_request"])
                if s in o.per_stage else o for o in ok if o.stage is None]
        parts.append(analyse(base + [o for o in ok if o.stage == s], confidence=confidence))
    if not parts:
        result = analyse(ok, confidence=confidence)
    else:
        result = dataclasses.replace(parts[0], stages=tuple(st for p in parts for st in p.stages))
    return dataclasses.replace(result, failed_servers=len(observations) - len(ok))


def failed_lines(observations: list[Observation]) -> list[str]:
    """One line per failed server: which one, at which level, why."""
    out = []
    for o in observations:
        if o.failed is not None:
            lv = Level(o.level, o.unit).label if o.stage else "0"
            out.append(f"server {o.slot} ({o.stage or 'baseline'} +{lv}) failed: {o.failed}")
    return out


__all__ = ["BenchError", "Level", "WhatIfError", "analysis", "failed_lines", "parse_levels", "parse_stages", "run"]
