"""`clef-prof analyze`: one or more captures, in one of four formats."""
from __future__ import annotations

import os
import sys

from ..base.errors import EXIT_STRICT
from .history import check_store, store_results
from .options import check_jobs, emit, import_numpy, render_text, say, stage_config


def cmd_analyze(args) -> int:
    from ..analyze.read.inputs import resolve

    check_jobs(args.jobs)
    check_store(args)
    import_numpy()
    resolved = [resolve(c) for c in args.captures]
    cfg = stage_config(args, [(c, m, e) for c, (e, m) in zip(args.captures, resolved)])
    paths = [e for e, _ in resolved]
    inputs = [*args.captures, *([args.spec] if args.spec else [])]
    if args.output:
        from ..base.safeio import check_output
        check_output(args.output, [*inputs, *paths])
    if len(paths) == 1 and not args.dask:
        results = [_analyze_one(paths[0], cfg, args).result]
    else:
        from ..analyze.parallel import analyze_many
        results = analyze_many(paths, cfg, args.requests, jobs=args.jobs, dask=args.dask)
    text = None
    if args.format == "json":
        import json
        docs = [r.to_json() for r in results]
        text = json.dumps(docs[0] if len(docs) == 1 else docs, indent=2) + "\n"
    elif args.format == "markdown":
        from ..explore import text as report
        text = "\n".join(report.render_markdown(r) for r in results)
    elif args.format == "csv":
        from ..explore import text as report
        text = "".join(report.render_csv(r) if i == 0 else report.render_csv(r).split("\n", 1)[1]
                       for i, r in enumerate(results))
    if text is not None:
        emit(text, args.output, inputs)
    else:
        from ..explore import text as report

        def render(console=None):
            for r in results:
                report.render_terminal(r, console, wide=args.wide)
        if args.output:
            emit(render_text(render, soft_wrap=True), args.output, inputs)
        else:
            render()
    if args.format == "csv" or args.output:         # the report holds them otherwise
        for r in results:
            for w in r.warnings:
                say(f"warning: {r.path}: {w}")
    store_results(args, "analyze", [r.to_json() for r in results])
    if args.strict and any(r.warnings for r in results):
        n = sum(len(r.warnings) for r in results)
        print(f"clef-prof: --strict: {n} warning(s); figures not trusted", file=sys.stderr)
        return EXIT_STRICT
    return 0


def _analyze_one(path, cfg, args):
    from ..analyze.pipeline import analyze

    if not sys.stderr.isatty() or args.format != "table" and not args.output:
        return analyze(path, cfg, requests=args.requests)
    from rich.console import Console
    from rich.markup import escape
    console = Console(stderr=True)
    name = escape(os.path.basename(path))
    with console.status(f"reading {name}") as status:
        return analyze(path, cfg, requests=args.requests, on_step=lambda s: status.update(f"reading {name}: {s}"))
