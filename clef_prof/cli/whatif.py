"""`clef-prof whatif`: what a stage's host time costs serving throughput and latency, measured by
slowing it down on fresh unprofiled servers (clef_prof.whatif: run, slopes, render, store)."""
from __future__ import annotations

import argparse
import sys

from ..annotate.delay import MODES
from .bench import add_load_options
from .options import HelpFormatter, emit


def add_parser(sub) -> None:
    p = sub.add_parser(
        "whatif", help="the cost of a stage's host time to serving: injected slowdowns, slopes with intervals",
        formatter_class=HelpFormatter,
        description="What if this stage were faster? Fresh servers, no profiler, in bench's balanced order\n"
                    "(ABBA over --servers rounds): a baseline (every stage timed, nothing added) and, per\n"
                    "stage and level, a server whose stage gets that much more host time on every call\n"
                    "(spin or sleep). Per stage and metric: the slope per +1 ms of added host time per\n"
                    "request, its interval over servers, and whether the stage is critical or hidden.\n"
                    "Exit 1 when a server failed (named; the others kept).",
        epilog="examples:\n"
               "  clef-prof whatif --stages transfer,head --levels 0,10%,25% \\\n"
               "      -- clef-prof demo-server --variant main\n"
               "  clef-prof whatif --spec annotations/clef-vllm.toml --stages head \\\n"
               "      --levels 0,50us,100us --preset vllm-embeddings --rate 200 \\\n"
               "      --save runs/head.json -- vllm serve M\n"
               "  clef-prof whatif --from runs/head.json -f markdown")
    e = p.add_argument_group("experiment")
    e.add_argument("--stages", help="stages to slow down, comma-separated (names of the spec or of the code's "
                                    "clef_prof.stage)")
    e.add_argument("--levels", default="0,10%,25%",
                   help="delay levels: 0 and at least two more, all in %% of the stage's own time per call "
                        "(0,10%%,25%%, the default) or in µs per call (0,50us,100us)")
    e.add_argument("--mode", choices=MODES, default="spin", help="spin: busy CPU holding the GIL, like Python work "
                   "(default); sleep: releases it, like a wait")
    e.add_argument("--servers", type=int, default=3, help="fresh servers per level (default 3)")
    e.add_argument("--spec", metavar="TOML", help="inject this stage spec into the server (clef-prof inject); "
                   "without it the server's code annotations are used")
    e.add_argument("--slo-ms", type=float, metavar="MS", help="also goodput: answers within MS ms per second")
    add_load_options(p)
    q = p.add_argument_group("checks and statistics")
    q.add_argument("--parity", type=int, default=0, metavar="N", help="send the same N bodies to every server "
                   "and compare the answers with the first server's")
    q.add_argument("--parity-tol", type=float, default=0.0, metavar="X", help="numbers within X are equal "
                   "(default 0: exact)")
    q.add_argument("--seed", type=int, default=0, help="seed of the bodies and arrivals (default 0)")
    q.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    q.add_argument("--cpus", metavar="LIST", help="pin every server to these CPUs, e.g. 4-15")
    q.add_argument("--load-cpus", metavar="LIST", dest="load_cpus",
                   help="pin the load generator (this process) to these CPUs, e.g. 0-3")
    q.add_argument("--from", metavar="FILE", dest="from_file",
                   help="re-analyse a --save file with this --confidence; no server is started")
    o = p.add_argument_group("output")
    o.add_argument("--format", "-f", choices=["table", "markdown", "json", "html"], default="table",
                   help="table (default), markdown, json, or html (a self-contained page: every server "
                        "a dot, the fitted line and its band, per stage and metric)")
    o.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    o.add_argument("--save", metavar="FILE", help="keep the observations (one per server) here, for --from")
    o.add_argument("--out", metavar="DIR", help="keep the server logs here")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the server command")
    p.set_defaults(func=cmd_whatif)


def _check_outputs(args, inputs: list[str]) -> None:
    from ..base.errors import ClefError
    from ..base.safeio import check_output

    for opt, path in (("-o", args.output), ("--save", args.save)):
        if path:
            try:
                check_output(path, inputs)
            except ClefError as exc:
                raise ClefError(f"{opt} {exc}") from None
    if args.output and args.save and args.output == args.save:
        raise ClefError("-o and --save name the same file; give two")


def cmd_whatif(args) -> int:
    from ..base.errors import ClefError
    from ..whatif import store
    from ..whatif.render import render
    from ..whatif.run import analysis, failed_lines, run

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not 0.5 <= args.confidence < 1:
        raise ClefError(f"--confidence {args.confidence}: expected a fraction in [0.5, 1), e.g. 0.95")
    if args.from_file:
        if command or args.stages:
            raise ClefError("--from re-analyses saved servers: give no server command or --stages with it")
        _check_outputs(args, [args.from_file])
        observations, meta = store.load(args.from_file)
    else:
        if not command:
            raise ClefError("give the server command after --, e.g. -- clef-prof demo-server --variant main "
                            "(or --from FILE)")
        if not args.stages:
            raise ClefError("give --stages, e.g. --stages head,transfer")
        if args.slo_ms is not None and not 0 < args.slo_ms < float("inf"):
            raise ClefError(f"--slo-ms {args.slo_ms:g}: expected a positive number of ms")
        args.cases = None
        _check_outputs(args, [p for p in (args.spec, args.body) if p])
        observations, meta = run(args, command)
        if args.save:
            store.save(args.save, observations, meta)
    result = analysis(observations, args.confidence)
    emit(render(result, "text" if args.format == "table" else args.format, observations), args.output)
    lines = failed_lines(observations)
    for line in lines:
        print(f"clef-prof: whatif: {line}", file=sys.stderr)
    return 1 if lines else 0
