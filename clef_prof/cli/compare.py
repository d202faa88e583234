"""`clef-prof compare`: main vs PR over repeated captures, with CI gates (clef_prof.compare)."""
from __future__ import annotations

import json
import sys

from ..compare.arm import CompareError, collect
from ..compare.gates import evaluate_gates, gate_exit, gate_line, point_warning, parse_gate, render_json, render_markdown, render_terminal
from .history import add_store_option, check_store, store_results
from .options import add_family_option, add_threshold_option, check_jobs, emit, import_numpy, render_text, say, stage_config


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare", help="compare arms of captures (main vs a PR): per-request metrics, intervals, gates",
        description="Compare the per-request metrics of arms of captures; the first arm is the baseline. "
                    "Each arm's figure, the change, a Welch t interval of the change between the arms' captures "
                    "(a verdict from 3 captures per arm, with the smallest change it could detect), and a "
                    "labelled within-capture bootstrap interval (batch noise of these captures only).")
    p.add_argument("folders", nargs="*", metavar="DIR",
                   help="a folder written by `clef-prof ab` (one subfolder per capture, manifest.json naming its "
                        "arm and export)")
    p.add_argument("--arm", action="append", default=[], metavar="NAME=CAPTURES",
                   help="an arm: comma-separated SQLite exports, .nsys-rep reports, record manifests (.json), "
                        "capture folders or globs; repeat for "
                        "each arm; the first is the baseline")
    p.add_argument("--baseline", help="the baseline arm (default: the first --arm; for ab folders an arm named "
                                      "main/baseline/base/control/master, else the first)")
    p.add_argument("--format", "-f", choices=["table", "markdown", "json"], default="table",
                   help="table: terminal table (default); markdown: for a pull request; json: the stable contract")
    p.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    p.add_argument("--fail-if", action="append", default=[], metavar="EXPR", dest="fail_if",
                   help="gate on the change from the baseline, e.g. \"stages.index.host_ms_per_request > +5%%\" or "
                        "\"per_request.h2d_copies > 0\" (> >= < <=; %% = relative); exit 1 when one fires, else exit 3 when one cannot be judged "
                        "(fewer than 3 captures an arm: not a pass)")
    p.add_argument("--gate-on", choices=["ci", "point"], default="ci",
                   help="noisy metrics: fire when the whole confidence interval is beyond the threshold (ci, "
                        "default) or when the point change is (point: fires on noise, warned); exact counts always "
                        "use the exact change")
    add_family_option(p)
    p.add_argument("--bootstrap", "-B", type=int, default=2000, metavar="B",
                   help="replicates of the within-capture bootstrap (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the within-capture bootstrap (default 0)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    p.add_argument("--jobs", "-j", type=int,
                   help="captures analyzed at once, each holding one analysis (default: as analyze, one per "
                        "two CPUs and capture, one below 64 MB of input; 1 keeps the peak memory to one analysis)")
    p.add_argument("--wide", action="store_true",
                   help="table: also the dotted metric names, the absolute change and p50/p99 per batch")
    p.add_argument("--all", action="store_true", help="also show metrics that are exactly 0 in every arm")
    p.add_argument("--list-metrics", action="store_true", help="list the metric names gates accept, and exit")
    g = p.add_argument_group("stage ranges")
    g.add_argument("--spec", help="stage spec TOML (annotations/*.toml) naming domain, batch range and stages")
    g.add_argument("--domain", help="NVTX domain of the stage ranges (default 'clef')")
    g.add_argument("--batch", help="name of the outer batch range (default 'pooler')")
    g.add_argument("--stages", help="comma-separated stage names (default parse,index,transfer,head,encode)")
    add_threshold_option(g)
    add_store_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..compare import engine as comparison

    cfg = stage_config(args)
    if args.list_metrics:
        for m in comparison.catalogue(cfg.stages, cuda=True):
            print(f"{m.name}\t{m.unit}")
        for alias, target in comparison.ALIASES.items():
            print(f"{alias}\t= {target}")
        return 0
    check_jobs(args.jobs)
    import_numpy()
    if args.seed < 0:
        raise CompareError(f"--seed {args.seed}: expected a whole number, 0 or more")
    if args.bootstrap < 100:
        raise CompareError(f"--bootstrap {args.bootstrap}: at least 100 replicates are needed for an interval")
    if not 0.5 <= args.confidence < 1:
        raise CompareError(f"--confidence {args.confidence}: expected a fraction in [0.5, 1), e.g. 0.95")
    check_store(args)
    arms = collect(args.folders, args.arm, args.baseline)
    cfg = stage_config(args, [(r.source, r.manifest, r.export) for refs in arms.captures.values() for r in refs])
    gates = [parse_gate(t, comparison.known_names(cfg.stages)) for t in args.fail_if]
    data = _load(arms, cfg, args)
    comp = comparison.compare(arms, data, cfg, n_boot=args.bootstrap, seed=args.seed, confidence=args.confidence,
                              family=args.family)
    from ..compare.family import family_gates
    verdicts = family_gates(evaluate_gates(gates, comp, args.gate_on), args.family, args.confidence)
    comp["gates"] = verdicts
    comp["warnings"] += point_warning(verdicts, args.gate_on)
    comp["method"]["gate_on"] = args.gate_on
    inputs = [p for refs in arms.captures.values() for r in refs for p in (r.export, r.source)] + ([args.spec] if args.spec else [])
    if args.format == "json":
        emit(render_json(comp), args.output, inputs)
    elif args.format == "markdown":
        emit(render_markdown(comp, args.all), args.output, inputs)
    elif args.output:
        emit(render_text(lambda console: render_terminal(comp, console, args.all, args.wide)), args.output, inputs)
    else:
        render_terminal(comp, show_all=args.all, wide=args.wide)
    store_results(args, "compare", [json.loads(render_json(comp))])
    kinds = {m["metric"]: m["kind"] for m in comp["metrics"]}
    for v in verdicts:
        say(f"clef-prof: {gate_line(v, kinds[v['metric']])}")
    if args.format != "table" or args.output:
        for w in comp["warnings"]:
            say(f"warning: {w}")
    return gate_exit(verdicts)


def _load(arms, cfg, args):
    from ..compare import engine as comparison

    from ..analyze.parallel import worker_count

    exports = sorted({r.export for refs in arms.captures.values() for r in refs})
    n = len(exports)
    if sys.stderr.isatty() and args.format == "table" and not args.output and n > 1:
        procs = worker_count(exports, args.jobs)
        say(f"analyzing {n} captures{f', {procs} at a time' if procs > 1 else ''} …")
    return comparison.load_all(arms, cfg, jobs=args.jobs)
