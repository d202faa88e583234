"""Command line: parse arguments, call the library, print. No analysis lives here."""
from __future__ import annotations

import argparse
import sys
import threading

from ..base.errors import EXIT_INPUT, EXIT_STRICT, ClefError, one_line
from .analyze import cmd_analyze
from .options import HelpFormatter, Parser, add_stage_options

# subcommand -> the module whose add_parser(subparsers) registers it; a command line naming one
# imports only that module (start-up stays small: `analyze --help` and `doctor` import no NumPy)
COMMANDS = {"slice": "slice", "scrub": "scrub", "compare": "compare", "inject": "inject", "report": "report",
            "doctor": "doctor", "record": "record", "ab": "ab", "demo-server": "demo_server", "demo": "demo",
            "load": "load", "bench": "bench", "export": "export", "history": "history",
            "whatif": "whatif", "predict": "predict"}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a command, only that command's module is imported."""
    from ..base.defaults import VERSION

    p = Parser(prog="clef-prof", description="Per-request host-path profiling of GPU model servers "
                                "from Nsight Systems captures.")
    p.add_argument("--version", action="version", version=f"clef-prof {VERSION}")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    a = sub.add_parser(
        "analyze", help="per-request stage spans, H2D copies, kernels and GPU overlap of a capture",
        formatter_class=HelpFormatter,
        description="Per-request host time of each stage (NVTX ranges nested in the batch range 'pooler n=K'),\n"
                    "H2D/D2H copies and bytes, kernel and graph launches, and how much of the pooler's host span\n"
                    "the GPU overlaps, from Nsight Systems captures. Warnings say which figures not to trust.",
        epilog="A capture is an nsys SQLite export, an .nsys-rep report (exported once with nsys, beside it or\n"
               "under $XDG_CACHE_HOME/clef-prof), a record manifest.json, or a record folder.\n\n"
               "examples:\n"
               "  clef-prof analyze traces/gpu25-pr-slice.sqlite\n"
               "  clef-prof analyze runs/pr --format markdown --strict\n"
               "  clef-prof analyze runs/ab/*/capture.sqlite -f json -o all.json  # a list")
    a.add_argument("captures", nargs="+", metavar="CAPTURE",
                   help="nsys SQLite export, .nsys-rep report, record manifest.json or record folder")
    a.add_argument("--format", "-f", choices=["table", "markdown", "csv", "json"], default="table",
                   help="table: terminal tables (default); markdown: for a pull request; csv: one row per stage "
                        "and capture; json: the stable contract (a list for several captures)")
    a.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    a.add_argument("--wide", action="store_true",
                   help="table: also every figure per stage (host ms total, per batch mean/p50/p99, shares, CUDA "
                        "counts), in blocks that fit the terminal")
    a.add_argument("--strict", action="store_true", help=f"exit {EXIT_STRICT} when the capture raises any warning")
    a.add_argument("--jobs", "-j", type=int, help="captures analyzed at once, on threads "
                   "(default: one per two CPUs for big inputs, one at a time for small ones)")
    a.add_argument("--dask", metavar="SCHEDULER", help="analyze the captures on a Dask cluster (address, or 'local'); "
                   "needs the dask.distributed package and paths every worker can read")
    add_stage_options(a)
    from .history import add_store_option
    add_store_option(a)
    a.set_defaults(func=cmd_analyze)

    import importlib
    command = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    wanted = [] if command == "analyze" else [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in wanted:
        importlib.import_module(f".{name}", __package__).add_parser(sub)
    if command == "analyze" or command in COMMANDS:
        p.command, p.command_args = command, argv[argv.index(command) + 1:]
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
        print(f"clef-prof: internal error: {type(exc).__name__}: {one_line(exc)} (rerun with --debug for a traceback)",
              file=sys.stderr)
        return EXIT_INPUT


def main(argv: list[str] | None = None) -> int:
    from ..base.glyphs import fit_streams, report_to
    fit_streams()
    argv = sys.argv[1:] if argv is None else argv
    parsed: list = []
    code = run_command(lambda a: parsed.append(build_parser(argv).parse_args(argv)), argparse.Namespace(
        debug="--debug" in argv[:argv.index("--")] if "--" in argv else "--debug" in argv))
    if not parsed:          # a parser that failed: said in one line, as a command's failure is
        return code
    args = parsed[0]
    if args.command in ("analyze", "compare", "bench", "whatif") and args.output == "-":      # -o -: stdout
        args.output = None
    with report_to(sys.stdout, to_file=bool(getattr(args, "output", None))):
        return run_command(args.func, args)


def entry() -> int:
    """The console script and `python -m clef_prof`: main(), then the interpreter's exit with
    SIGINT ignored. The exit code is decided by then; a Ctrl-C during the exit (multiprocessing's
    finalizers, atexit) printed "Exception ignored ... Traceback", or, after Python restored the
    default action, killed the process with no word."""
    import signal
    try:
        code = main()
    except KeyboardInterrupt:       # between the command's end and main's return
        print("clef-prof: interrupted", file=sys.stderr)
        code = 130
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(entry())
