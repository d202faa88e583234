"""`clef-prof load`: closed-loop HTTP load (clef_prof.record.load)."""
from __future__ import annotations

import argparse
import json
import math
import time

from ..base.errors import ClefError
from ..record.load import Load, LoadSettings
from .options import HelpFormatter


def add_load_options(p: argparse.ArgumentParser, url: bool = True) -> None:
    g = p.add_argument_group("load (built-in generator)")
    if url:
        g.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (default %(default)s)")
    g.add_argument("--concurrency", "-c", type=int, default=16, help="clients, each with one request in flight (default 16)")
    g.add_argument("--words", type=int, default=200, help="words of input state per request (default 200)")
    g.add_argument("--questions", type=int, default=1, help="questions per request (default 1)")
    g.add_argument("--request-path", default="/v1/systemone", help="path the requests are POSTed to (default %(default)s)")
    g.add_argument("--request-body", metavar="FILE", help="a JSON file sent as the body of every request, instead of "
                   "generated Clef-style bodies")
    g.add_argument("--request-timeout", type=float, default=30.0, help="seconds before a request counts as an error")
    g.add_argument("--request-id-field", metavar="NAME", default=None,
                   help="also put each request's id (its X-Request-Id) into this field of the JSON body, for servers "
                        "that take their request id from the body (record --preset sglang: rid)")


def settings_from(args, url: str | None = None, id_field: str | None = None) -> LoadSettings:
    """The load of the command line; `id_field`: the preset's body id field, when none is given."""
    if args.concurrency < 1:
        raise ClefError("--concurrency must be at least 1")
    if not 0 < args.request_timeout < math.inf:       # aiohttp takes 0, negative and NaN for no timeout
        raise ClefError("--request-timeout must be a positive number of seconds")
    return LoadSettings(url=url or args.url, path=args.request_path, concurrency=args.concurrency, words=args.words,
                        questions=args.questions, timeout_s=args.request_timeout, body_file=args.request_body,
                        id_field=args.request_id_field or id_field)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "load", help="drive a server with the built-in closed-loop load and print latency figures",
        formatter_class=HelpFormatter,
        description="Closed-loop load: --concurrency clients each POST one Clef-style request (--words of state,\n"
                    "--questions questions; or --request-body FILE) and send the next when it is answered, for\n"
                    "--duration seconds. Prints completions, throughput, errors and latency p50/p99 (--json for\n"
                    "all figures); exit 1 when nothing completed or any request failed. `record` drives the\n"
                    "same load inside its capture window.",
        epilog="examples:\n"
               "  clef-prof load --url http://127.0.0.1:8000 --duration 10 --concurrency 16\n"
               "  clef-prof load --concurrency 4 --words 50 --questions 3 --json")
    _arguments(p)
    p.set_defaults(func=cmd_load)


def _arguments(p: argparse.ArgumentParser) -> None:
    add_load_options(p)
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load (default 10)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def cmd_load(args) -> int:
    if not 0 < args.duration < math.inf:
        raise ClefError("--duration must be a positive number of seconds")
    load = Load(settings_from(args)).start()
    t0 = time.time_ns()
    try:
        time.sleep(args.duration)
    finally:
        t1 = time.time_ns()
        load.stop(grace_s=2.0)
    s = load.summary(t0, t1)
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        def ms(v):
            return "-" if v is None else f"{v:.2f} ms"
        print(f"{s['completions']} completions in {args.duration:g} s ({s['throughput_rps'] or 0:.1f}/s), "
              f"{s['errors']} errors; latency p50 {ms(s['latency_ms_p50'])}, p99 {ms(s['latency_ms_p99'])}")
        for k, n in s["error_kinds"].items():
            print(f"  {n} x {k}")
    return 0 if s["completions"] and not s["errors"] else 1
