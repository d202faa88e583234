"""`clef-prof record`: capture a server under nsys (clef_prof.record.session does the work)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..base.config import DEFAULT_PY_SAMPLING_HZ, MAX_PY_SAMPLING_HZ as MAX_HZ
from ..base.errors import ClefError
from ..base.nsys import ENV_IMPORTER_LIBS, TraceOptions
from ..record.load import check_url
from ..record.plan import RecordConfig
from ..record.presets import DEFAULT_NVTX_CAPTURE, PRESETS, PROFILERS, WINDOWS
from ..record.session import record
from .load import add_load_options, settings_from


def add_record_options(p: argparse.ArgumentParser, server_url: bool = True,
                       out_help: str = "folder for the report, its SQLite export, logs and manifest.json") -> None:
    p.add_argument("--out", "-o", required=True, help=out_help)
    p.add_argument("--name", default="capture", help="file name of the capture in --out (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    p.add_argument("--spec", help="stage spec TOML: inject its NVTX wrappers into every Python process of the server")
    p.add_argument("--profiler", choices=PROFILERS, default="nsys",
                   help="nsys (default), or torch: the server's own PyTorch profiler behind its /start_profile and "
                        "/stop_profile, writing Kineto traces into OUT/NAME.torch (no nsys needed; vLLM: the "
                        "--profiler-config torch form is added; SGLang: its trace folder and start body)")
    p.add_argument("--torch-stack", action="store_true",
                   help="--profiler torch: record Python stacks (with_stack=True), which analyze turns into the "
                        "functions of each stage; it slows the server more (the manifest's profiler_cost says how much)")
    n = p.add_argument_group("nsys")
    n.add_argument("--nsys", help="the nsys binary or its folder (else $CLEF_PROF_NSYS, nsys on PATH, .nsys/*/nsys)")
    n.add_argument("--window", choices=WINDOWS, default="auto",
                   help="who opens the capture window: profiler-api (POST /start_profile -> cudaProfilerStart), "
                        "nsys (nsys start/stop --session; any server, no GPU needed), nvtx (a range the server "
                        "opens); auto: nsys without a GPU; with one, profiler-api when the preset mounts the "
                        "endpoints (vllm), else the server is probed for them once healthy")
    n.add_argument("--trace", "-t", default="cuda,nvtx,osrt", help="nsys --trace (default %(default)s)")
    n.add_argument("--python-sampling", type=float, default=DEFAULT_PY_SAMPLING_HZ, metavar="HZ",
                   help="clef-prof's Python sampler in the server (which functions spend each stage's time; "
                        "docs/sampling.md), samples per second per thread, 0 = off (default %(default)g)")
    n.add_argument("--nsys-python-sampling", type=int, default=0, metavar="HZ",
                   help="nsys' own Python sampler (2023.4+; analyze reads its frames from a JSON export of the "
                        "report when the capture has no clef-prof samples; 2022.4 has none), 0 = off (default)")
    n.add_argument("--cuda-graph-trace", choices=["graph", "node"], default=None,
                   help="CUDA graphs as a whole or node by node (default graph; node with --preset vllm, as "
                        "vLLM's profiling guide recommends)")
    n.add_argument("--no-trace-fork", action="store_true", help="leave out --trace-fork-before-exec=true")
    n.add_argument("--capture-range-end", choices=["stop", "stop-shutdown"], default="stop",
                   help="profiler-api / nvtx windows: keep the server running after the window (stop), or let nsys "
                        "end it (stop-shutdown)")
    n.add_argument("--nvtx-capture", default=DEFAULT_NVTX_CAPTURE, help="--window nvtx: RANGE@DOMAIN (default %(default)s)")
    n.add_argument("--sample", default="none", help="nsys CPU sampling (-s; default none)")
    n.add_argument("--cpuctxsw", default="none", help="nsys --cpuctxsw (default none)")
    n.add_argument("--nsys-arg", action="append", default=[], metavar="ARG", help="extra switch for nsys profile/launch "
                   "(repeatable), e.g. --nsys-arg=--osrt-threshold=10000; one that record also sets replaces record's, "
                   "e.g. --nsys-arg=--trace=cuda,nvtx,osrt,cublas (not --output, --capture-range and the like)")
    n.add_argument("--no-export", action="store_true", help="keep the .nsys-rep only")
    n.add_argument("--importer-libs", metavar="DIR", default=os.environ.get(ENV_IMPORTER_LIBS),
                   help="a folder of libraries (libdw.so.1, libelf.so.1) for QdstrmImporter alone, when nsys leaves "
                        f"a .qdstrm (default ${ENV_IMPORTER_LIBS})")
    s = p.add_argument_group("server control")
    s.add_argument("--preset", choices=sorted(PRESETS), default="generic",
                   help="profiling endpoints and bodies: vllm (adds --profiler-config '{\"profiler\": \"cuda\"}' "
                        "when missing, VLLM_WORKER_MULTIPROC_METHOD=spawn, --cuda-graph-trace=node), sglang (port "
                        "30000, CUDA_PROFILER activity), generic, none")
    if server_url:
        s.add_argument("--url", default=None, help="server base URL (default http://127.0.0.1:8000; :30000 with "
                                                   "--preset sglang)")
    s.add_argument("--health-url", help="health check URL (default URL/health)")
    s.add_argument("--health-timeout", type=float, default=120.0, help="seconds to wait for health (default 120)")
    s.add_argument("--start-path", help="path of the start endpoint (default /start_profile)")
    s.add_argument("--stop-path", help="path of the stop endpoint (default /stop_profile)")
    s.add_argument("--start-body", help="JSON body of the start call (preset's by default; '' for none)")
    s.add_argument("--stop-body", help="JSON body of the stop call")
    s.add_argument("--no-endpoints", action="store_true", help="never call the profiling endpoints (--window nsys)")
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for the server")
    s.add_argument("--keep-env", action="store_true", help="keep --env values and secret-looking server arguments "
                   "in manifest.json (by default they are replaced by [removed])")
    s.add_argument("--stop-timeout", type=float, default=15.0, help="seconds the server gets to exit on SIGINT "
                   "(then SIGTERM, then SIGKILL)")
    s.add_argument("--finalize-timeout", type=float, default=300.0, help="seconds nsys gets to write the report")
    s.add_argument("--retries", type=int, default=1, help="record again, with a fresh server, when the export holds no "
                   "NVTX record at all (nsys occasionally loses a capture's data on an overloaded machine) or nsys "
                   "crashed while starting the server (a start-up race of nsys under load); N tries for each; default 1")
    w = p.add_argument_group("timing")
    w.add_argument("--warmup", type=float, default=15.0, metavar="S", help="seconds of load before the window (default 15)")
    w.add_argument("--warmup-requests", type=int, default=0, metavar="N", help="also wait for N completed requests")
    w.add_argument("--duration", type=float, default=3.0, metavar="S", help="seconds the window stays open (default 3)")
    add_load_options(p, url=False)
    p.add_argument("--client-cmd", help="drive the load with this shell command instead (started after warm-up "
                   "begins, ended after the window; $CLEF_PROF_URL holds the server URL)")
    p.add_argument("--quiet", "-q", action="store_true", help="only the summary lines (and a line per retry)")


def config_from(args, server: list[str], out: str | None = None) -> RecordConfig:
    env = {}
    for item in args.env:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ClefError(f"--env {item!r}: expected NAME=VALUE")
        env[k] = v
    for opt in ("start_body", "stop_body"):
        v = getattr(args, opt)
        if v:
            try:
                json.loads(v)
            except ValueError as exc:
                raise ClefError(f"--{opt.replace('_', '-')} {v!r} is not JSON ({exc})") from None
    if not 0 < args.duration < math.inf:
        raise ClefError("--duration must be positive")
    if not 0 <= args.python_sampling <= MAX_HZ:
        raise ClefError(f"--python-sampling {args.python_sampling:g}: a rate from 0 (off) to {MAX_HZ:,} Hz")
    trace = TraceOptions(trace=args.trace, python_sampling_hz=max(0, args.nsys_python_sampling),
                         cuda_graph_trace=args.cuda_graph_trace or PRESETS[args.preset].cuda_graph_trace,
                         trace_fork=not args.no_trace_fork,
                         sample=args.sample or None, cpuctxsw=args.cpuctxsw or None, extra=list(args.nsys_arg))
    url = getattr(args, "url", None) or PRESETS[args.preset].url
    check_url(url, "--url")
    if args.health_url:
        check_url(args.health_url, "--health-url")
    return RecordConfig(
        out=out or args.out, server=server, name=args.name, nsys=args.nsys, window=args.window, preset=args.preset,
        url=url, health_url=args.health_url, health_timeout=args.health_timeout, start_path=args.start_path,
        stop_path=args.stop_path, start_body=args.start_body if args.start_body != "" else None,
        stop_body=args.stop_body if args.stop_body != "" else None, call_endpoints=not args.no_endpoints,
        nvtx_capture=args.nvtx_capture, capture_range_end=args.capture_range_end, trace=trace,
        warmup_s=max(0.0, args.warmup), warmup_requests=max(0, args.warmup_requests), duration_s=args.duration,
        load=None if args.client_cmd else settings_from(args, url, PRESETS[args.preset].id_field), client_cmd=args.client_cmd, spec=args.spec,
        env=env, stop_timeout=args.stop_timeout, retries=args.retries, finalize_timeout=args.finalize_timeout, export=not args.no_export,
        importer_libs=args.importer_libs, argv=list(sys.argv), quiet=args.quiet, keep_env=args.keep_env,
        profiler=getattr(args, "profiler", "nsys"), py_sampling_hz=args.python_sampling,
        torch_stack=getattr(args, "torch_stack", False))


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="capture a server under nsys: health, warm-up, window, load, export, manifest",
                       description="Capture a server under Nsight Systems: `clef-prof record --out DIR [options] -- "
                                   "SERVER COMMAND`.")
    add_record_options(p)
    p.add_argument("server", nargs=argparse.REMAINDER, help="-- then the server command")
    p.set_defaults(func=cmd_record)


def cmd_record(args) -> int:
    server = list(args.server)
    if server and server[0] == "--":
        server = server[1:]
    cfg = config_from(args, server)
    record(cfg, dry_run=args.dry_run)
    return 0
