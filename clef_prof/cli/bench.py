"""`clef-prof bench`: serving A/B without the profiler (clef_prof.bench.run)."""
from __future__ import annotations

import json
import os
import sys

from ..bench import load as bl
from ..bench.run import BenchError, rejudge, run, write_json
from .history import add_store_option, check_store, store_results
from .options import HelpFormatter, add_family_option, emit, render_text, say


def add_load_options(p) -> None:
    """The requests, cases and timing options bench and whatif share (bench.run reads them)."""
    g = p.add_argument_group("requests")
    g.add_argument("--preset", choices=sorted(bl.PRESETS), default="demo",
                   help="body and endpoint: demo (POST /v1/systemone, Clef body), vllm-embeddings (/v1/embeddings), "
                        "vllm-pooling (/pooling), raw (--body FILE); default demo")
    g.add_argument("--url", default="http://127.0.0.1:8000", help="the arms' base URL (default %(default)s)")
    g.add_argument("--path", help="request path (default: the preset's)")
    g.add_argument("--health-url", help="health URL (default URL/health)")
    g.add_argument("--metrics-url", metavar="URL|none",
                   help="the servers' Prometheus endpoint, scraped every 0.5 s during the windows for "
                        "queue depth and running requests (vllm:num_requests_waiting/running, SGLang's, the demo "
                        "server's); default URL/metrics when it answers with them; none: no scrape")
    g.add_argument("--body", metavar="FILE", help="--preset raw: a JSON body, or JSON Lines (bodies cycled)")
    g.add_argument("--model", help="vllm presets: the model name (default: the first of GET /v1/models)")
    g.add_argument("--check-response", metavar="PATH|MODULE:FUNC",
                   help="check every answer: a dotted path that must exist (answers.q0.score, data[0].embedding), "
                        "or a callable f(response, request) returning True/None, or False/a reason; failures are "
                        "errors of kind 'check: ...' (e.g. clef_prof.bench.load:demo_words)")
    g.add_argument("--request-timeout", type=float, default=60.0, metavar="S", help="seconds per request (default 60)")
    c = p.add_argument_group("cases")
    c.add_argument("--concurrency", "-c", default="16", help="clients in flight, comma-separated (default 16)")
    c.add_argument("--words", default="200", help="words of input per request, comma-separated (default 200)")
    c.add_argument("--questions", default="1", help="questions (vllm: inputs) per request, comma-separated "
                                                    "(default 1)")
    c.add_argument("--rate", help="open loop: Poisson arrivals per second (comma-separated for several); "
                                  "concurrency then caps the connections")
    c.add_argument("--cases", metavar="FILE", help='a JSON list of cases instead of the matrix: [{"concurrency": 8, '
                                                   '"words": 200, "questions": 1, "rate": null}, ...]')
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=float, default=10.0, metavar="S", help="warm-up seconds per server (and at "
                   "least max(C, 8) requests; default 10)")
    t.add_argument("--windows", type=int, default=1, help="windows per case and server (default 1: more servers, "
                   "not more windows, narrow the interval)")
    t.add_argument("--window-s", type=float, default=20.0, metavar="S", help="seconds per window (default 20)")
    t.add_argument("--health-timeout", type=float, default=300.0, metavar="S", help="seconds to become healthy "
                   "(default 300)")
    t.add_argument("--stop-timeout", type=float, default=15.0, metavar="S",
                   help="seconds the server gets to exit on SIGINT (then SIGTERM, then SIGKILL)")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="serving A/B without the profiler: fresh servers in ABBA order, windows per case, intervals",
        formatter_class=HelpFormatter,
        description="Serving A/B without nsys: per round a fresh server per arm (ABBA across rounds), health,\n"
                    "warm-up, then each case of the matrix (order reversed every other server) in --windows windows\n"
                    "of --window-s seconds. Per case: requests/s, p50/p99 latency and peak device memory of each\n"
                    "arm, the change and its interval between the arms' servers in run order (each server's figure\n"
                    "over its windows, a linear drift over the run fitted beside the change, shown as a drift check;\n"
                    "a fresh server is the unit that varies), a verdict from 3 servers per arm, and the\n"
                    "smallest change the design could detect. --from DIR re-judges a saved run without servers.\n"
                    "Exit 1 when a gate fires, outputs differ (--parity), or a request failed (unless --allow-errors);\n"
                    "else exit 3 when a gate cannot be judged (fewer than 3 servers an arm): never a pass.",
        epilog="examples:\n"
               "  clef-prof bench --arm main='clef-prof demo-server --variant main' \\\n"
               "      --arm pr='clef-prof demo-server --variant pr' --rounds 8 \\\n"
               "      --concurrency 8,16 --words 200,1000 --windows 1 --window-s 20 \\\n"
               "      --warmup 10 -f markdown\n"
               "  clef-prof bench --arm main='vllm serve M' \\\n"
               "      --arm pr='/pr/venv/bin/vllm serve M' --preset vllm-embeddings \\\n"
               "      --concurrency 32 --rate 200 --fail-if 'throughput_rps < -2%' \\\n"
               "      --cpus 4-15 --load-cpus 0-3 --out runs/bench1\n"
               "  clef-prof bench --from runs/bench1 --confidence 0.9 \\\n"
               "      --fail-if 'throughput_rps < -5%'")
    p.add_argument("--arm", action="append", default=[], metavar="NAME=COMMAND",
                   help="an arm and its server command (quoted; repeat; the first is the baseline)")
    p.add_argument("--rounds", type=int, default=8, help="servers per arm (default 8: +15%% found 85%% of the time at "
                   "an 8%% spread between servers; a verdict needs 3, as a fresh server is the unit that varies)")
    p.add_argument("--order", choices=["ABBA", "AB"], default="ABBA", help="arm order reversed every other round "
                   "(ABBA, default) or fixed (AB)")
    add_load_options(p)
    q = p.add_argument_group("checks and statistics")
    q.add_argument("--parity", type=int, default=0, metavar="N", help="send the same N bodies to every server and "
                   "compare the answers with the baseline's first server")
    q.add_argument("--parity-tol", type=float, default=0.0, metavar="X", help="numbers within X are equal (default 0: "
                   "exact)")
    q.add_argument("--allow-errors", action="store_true", help="failed requests do not make the exit code 1")
    q.add_argument("--fail-if", action="append", default=[], metavar="EXPR", dest="fail_if",
                   help="gate on a change, as compare does: \"throughput_rps < -2%%\", \"latency_ms_p99 > +10%%\"")
    q.add_argument("--slo", action="append", default=[], metavar="METRIC<=MS",
                   help="a latency SLO (repeat for several): \"p99_ms<=200\" or \"latency_ms_p99<=200\" (p50, p90, "
                        "p99, mean); adds goodput (requests/s answered within the tightest SLO), its change and "
                        "gate (\"goodput < -2%%\"), and per load group the highest load whose figures meet them all")
    q.add_argument("--gate-on", choices=["ci", "point"], default="ci", help="fire when the whole interval is beyond "
                   "the threshold (ci, default) or the point change is (point: fires on noise, warned)")
    add_family_option(q)
    q.add_argument("--seed", type=int, default=0, help="seed of the bodies and arrivals (default 0)")
    q.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    q.add_argument("--cpus", metavar="LIST", help="pin every server (and the processes it starts) to these CPUs, "
                   "e.g. 4-15: less spread between servers")
    q.add_argument("--load-cpus", metavar="LIST", dest="load_cpus",
                   help="pin the load generator (this process) to these CPUs, e.g. 0-3 (apart from --cpus)")
    q.add_argument("--from", metavar="DIR", dest="from_dir",
                   help="re-judge an earlier run from its saved windows (its --out folder or JSON report) with this "
                        "--confidence, --fail-if and --gate-on; no server is started")
    o = p.add_argument_group("output")
    o.add_argument("--format", "-f", choices=["table", "markdown", "json"], default="table",
                   help="table (default), markdown, or json: the stable contract")
    o.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    o.add_argument("--out", metavar="DIR", help="keep the server logs and bench.json (every window) here")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress lines (on stderr: each server with the run's ETA; on a "
                   "terminal also each window with its load point)")
    add_store_option(o)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from ..bench import stats as bs
    from ..compare.gates import gate_exit, gate_line, point_warning

    check_store(args)
    if args.from_dir:
        if args.arm or args.out:
            raise BenchError("--from re-judges saved windows: give no --arm or --out with it")
        if args.output:
            from ..base.safeio import check_output
            src = os.path.join(args.from_dir, "bench.json") if os.path.isdir(args.from_dir) else args.from_dir
            check_output(args.output, [src])
        result = rejudge(args)
    else:
        result = run(args)
    if args.out:
        write_json(os.path.join(os.path.abspath(args.out), "bench.json"), result)
    if args.format == "json":
        emit(json.dumps(result, indent=2) + "\n", args.output)
    elif args.format == "markdown":
        emit(bs.render_markdown(result), args.output)
    elif args.output:
        emit(render_text(lambda console: bs.render_terminal(result, console), width=180), args.output)
    else:
        bs.render_terminal(result)
    store_results(args, "bench", [result])
    for v in result["gates"]:
        say(f"clef-prof: {v['case']}: {gate_line(v, '')}")
    for w in point_warning(result["gates"], result["method"]["gate_on"]):
        say(f"warning: {w}")
    code = gate_exit(result["gates"])
    par = result["parity"]
    if par and par["mismatches"]:
        code = 1
        for m in par["mismatches"][:20]:
            print(f"clef-prof: parity: {m['arm']} server {m['server']}, body {m['body_index']}: {m['difference']} "
                  f"(body: {m['body'][:120]})", file=sys.stderr)
        print(f"clef-prof: parity: {len(par['mismatches'])} answers differ from {par['reference']}", file=sys.stderr)
    failed = {}
    for c in result["cases"]:
        for a in c["arms"].values():
            for k, n in a["errors"]["kinds"].items():
                failed[k] = failed.get(k, 0) + n
    if failed and not args.allow_errors:
        code = 1
        print(f"clef-prof: {sum(failed.values())} requests failed ("
              + ", ".join(f"{k}: {n}" for k, n in sorted(failed.items()))
              + "); the figures count successful requests only (--allow-errors to accept)", file=sys.stderr)
    return code
