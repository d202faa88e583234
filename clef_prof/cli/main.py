"""Command line: parse arguments, call the library, print. No analysis lives here."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import EXIT_INPUT, EXIT_STRICT, ClefError
from ..config import DEFAULT_BATCH, DEFAULT_DOMAIN, DEFAULT_STAGES, StageConfig

# subcommand -> the module whose add_parser(subparsers) registers it; a command line naming one
# imports only that module (start-up stays small: `analyze --help` and `doctor` import no NumPy)
COMMANDS = {"slice": "slicing", "scrub": "scrub", "compare": "compare", "inject": "inject", "report": "htmlreport",
            "doctor": "doctor", "record": "record", "ab": "ab", "demo-server": "demo_server", "load": "loadgen",
            "bench": "bench"}


def _stage_config(args) -> StageConfig:
    if getattr(args, "spec", None):
        from ..annotate.spec import load
        cfg = load(args.spec).config
    else:
        cfg = StageConfig()
    return StageConfig(
        domain=args.domain if args.domain is not None else cfg.domain,
        batch=args.batch if args.batch is not None else cfg.batch,
        stages=tuple(s.strip() for s in args.stages.split(",") if s.strip()) if args.stages else cfg.stages,
        findings=finding_thresholds(cfg, args))


def finding_thresholds(cfg: StageConfig, args) -> tuple[tuple[str, float], ...]:
    """The spec's [findings] thresholds, then the --threshold flags over them."""
    from ..analyze.findings import parse_threshold

    merged = dict(cfg.findings)
    merged.update(parse_threshold(t) for t in getattr(args, "threshold", None) or [])
    return tuple(merged.items())


def add_threshold_option(g) -> None:
    g.add_argument("--threshold", action="append", metavar="KEY=VALUE",
                   help="override a findings threshold, e.g. overlap_max_pct=30 (repeat; also a [findings] table "
                        "in the spec; the README lists them)")


def add_stage_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("stage ranges")
    g.add_argument("--spec", help="stage spec TOML (annotations/*.toml) naming domain, batch range and stages")
    g.add_argument("--domain", help=f"NVTX domain of the stage ranges (default {DEFAULT_DOMAIN!r}; '' = default domain)")
    g.add_argument("--batch", help=f"name of the outer batch range (default {DEFAULT_BATCH!r}, message 'pooler n=K')")
    g.add_argument("--stages", help=f"comma-separated stage names (default {','.join(DEFAULT_STAGES)})")
    g.add_argument("--requests", type=int, help="total requests in the capture, when batch ranges carry no size")
    add_threshold_option(g)


def cmd_analyze(args) -> int:
    from ..analyze.inputs import resolve

    cfg = _stage_config(args)
    paths = [resolve(c)[0] for c in args.captures]
    if args.output:
        from ..safeio import check_output
        check_output(args.output, [*args.captures, *paths, *([args.spec] if args.spec else [])])
    if len(paths) == 1 and not args.dask:
        results = [_analyze_one(paths[0], cfg, args).result]
    else:
        from ..analyze.parallel import analyze_many
        results = analyze_many(paths, cfg, args.requests, jobs=args.jobs, dask=args.dask)
    text = None
    if args.format == "json":
        import json
        text = json.dumps(results[0] if len(results) == 1 else results, indent=2) + "\n"
    elif args.format == "markdown":
        from ..explore import text as report
        text = "\n".join(report.render_markdown(r) for r in results)
    elif args.format == "csv":
        from ..explore import text as report
        text = "".join(report.render_csv(r) if i == 0 else report.render_csv(r).split("\n", 1)[1]
                       for i, r in enumerate(results))
    if text is not None:
        _emit(text, args.output, [*args.captures, *([args.spec] if args.spec else [])])
        if args.format == "csv" or args.output:
            for r in results:
                for w in r["warnings"]:
                    print(f"warning: {r['path']}: {w}", file=sys.stderr)
    else:
        from ..explore import text as report
        for r in results:
            report.render_terminal(r)
    if args.strict and any(r["warnings"] for r in results):
        n = sum(len(r["warnings"]) for r in results)
        print(f"clef-prof: --strict: {n} warning(s); figures not trusted", file=sys.stderr)
        return EXIT_STRICT
    return 0


def _analyze_one(path, cfg, args):
    from ..analyze.result import analyze

    if not sys.stderr.isatty() or args.format != "table" and not args.output:
        return analyze(path, cfg, requests=args.requests)
    from rich.console import Console
    from rich.markup import escape
    console = Console(stderr=True)
    name = escape(os.path.basename(path))
    with console.status(f"reading {name}") as status:
        return analyze(path, cfg, requests=args.requests, on_step=lambda s: status.update(f"reading {name}: {s}"))


def _emit(text: str, output: str | None, inputs=()) -> None:
    """Write to `output` (never over one of `inputs`, complete or not at all), or to stdout."""
    if output:
        from ..safeio import write_text
        write_text(output, text, inputs)
    else:
        sys.stdout.write(text)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a command, only that command's module is imported."""
    from .. import __version__

    p = argparse.ArgumentParser(prog="clef-prof", description="Per-request host-path profiling of GPU model servers "
                                "from Nsight Systems captures.")
    p.add_argument("--version", action="version", version=f"clef-prof {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    a = sub.add_parser(
        "analyze", help="per-request stage spans, H2D copies, kernels and GPU overlap of a capture",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Per-request host time of each stage (NVTX ranges nested in the batch range 'pooler n=K'),\n"
                    "H2D/D2H copies and bytes, kernel and graph launches, and how much of the pooler's host span\n"
                    "the GPU overlaps, from Nsight Systems captures. Warnings say which figures not to trust.",
        epilog="A capture is an nsys SQLite export, an .nsys-rep report (exported once with nsys, beside it or\n"
               "under $XDG_CACHE_HOME/clef-prof), a record manifest.json, or a record folder.\n\n"
               "examples:\n"
               "  clef-prof analyze traces/gpu-main-slice.sqlite\n"
               "  clef-prof analyze runs/pr --format markdown --strict\n"
               "  clef-prof analyze runs/ab/*/capture.sqlite -f json -o all.json   # a JSON list, in order")
    a.add_argument("captures", nargs="+", metavar="CAPTURE",
                   help="nsys SQLite export, .nsys-rep report, record manifest.json or record folder")
    a.add_argument("--format", "-f", choices=["table", "markdown", "csv", "json"], default="table",
                   help="table: terminal tables (default); markdown: for a pull request; csv: one row per stage "
                        "and capture; json: the stable contract (a list for several captures)")
    a.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    a.add_argument("--strict", action="store_true", help=f"exit {EXIT_STRICT} when the capture raises any warning")
    a.add_argument("--jobs", "-j", type=int, help="captures analyzed at once in worker processes "
                   "(default: one per CPU for big inputs, in-process for small ones)")
    a.add_argument("--dask", metavar="SCHEDULER", help="analyze the captures on a Dask cluster (address, or 'local'); "
                   "needs the dask.distributed package and paths every worker can read")
    add_stage_options(a)
    a.set_defaults(func=cmd_analyze)

    import importlib
    command = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    wanted = [] if command == "analyze" else [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in wanted:
        importlib.import_module(f".{name}", __package__).add_parser(sub)
    return p


def run_command(func, args) -> int:
    """Run a subcommand: one line on stderr for user errors (their exit code), 130 on Ctrl-C,
    and one line for internal errors too, unless --debug asks for the traceback."""
    try:
        return func(args)
    except ClefError as exc:
        print(f"clef-prof: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("clef-prof: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        print(f"clef-prof: internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)",
              file=sys.stderr)
        return EXIT_INPUT


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
