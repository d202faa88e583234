"""`clef-prof demo-server`: the annotated demo server (clef_prof.record.demo_server)."""
from __future__ import annotations

import argparse
import sys

from ..record.demo_server import MAX_BATCH, SYNC_MODES, DemoServer
from .options import HelpFormatter


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", choices=["main", "pr"], default="pr",
                   help="main: 9 pageable blocking H2D copies per request; pr: 3 packed pinned async copies")
    p.add_argument("--sync", choices=SYNC_MODES, default="none",
                   help="item: one .item() per request in transfer (DtoH copy + stream sync); device: one "
                        "torch.cuda.synchronize() per request there; none (default). A no-op on the CPU path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: CUDA when torch sees a GPU, else the CPU path")
    p.add_argument("--max-batch", type=int, default=MAX_BATCH, help=f"largest batch (default {MAX_BATCH})")
    p.add_argument("--quiet", action="store_true", help="no start and stop lines on stderr")
    f = p.add_argument_group("fault injection (for testing `clef-prof record` and `bench`)")
    f.add_argument("--delay-ms", type=float, default=0.0, metavar="MS",
                   help="the pooler takes MS ms more per request (a sleep in head): a slower server")
    f.add_argument("--score-offset", type=float, default=0.0, metavar="F", help="add F to every score: other outputs")
    f.add_argument("--die-after-requests", type=int, metavar="N", help="SIGKILL itself after serving N requests")
    f.add_argument("--no-profile-endpoints", action="store_true", help="/start_profile and /stop_profile answer 404")
    f.add_argument("--die-in-window", type=float, metavar="S", help="SIGKILL itself S seconds after /start_profile")
    f.add_argument("--fail-at-start", action="store_true", help="print an error and exit 3 before listening")
    f.add_argument("--never-healthy", action="store_true", help="/health answers 503 forever")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo-server", help="a reference Clef-style pooling server annotated with clef_prof stages",
        formatter_class=HelpFormatter,
        description="A reference pooling server: POST /v1/systemone, GET /health and /version, POST /start_profile\n"
                    "and /stop_profile. A batcher runs up to --max-batch queued requests per 'pooler n=K' range,\n"
                    "with the stages parse, index, transfer, head and encode. On a GPU, main makes 9 pageable H2D\n"
                    "copies per request and pr 3 pinned ones; without one a CPU path runs the same stages.",
        epilog="examples:\n"
               "  clef-prof demo-server --variant main --port 8000\n"
               "  clef-prof record --out runs/demo -- clef-prof demo-server --variant pr")
    _arguments(p)
    p.set_defaults(func=cmd_demo_server)


def cmd_demo_server(args) -> int:
    if args.fail_at_start:
        print("demo-server: simulated start-up failure (--fail-at-start): model weights not found", file=sys.stderr,
              flush=True)
        return 3
    server = DemoServer(args.variant, args.host, args.port, args.device, args.max_batch,
                        profile_endpoints=not args.no_profile_endpoints, die_in_window_s=args.die_in_window,
                        never_healthy=args.never_healthy, quiet=args.quiet, delay_ms=args.delay_ms,
                        score_offset=args.score_offset, die_after_requests=args.die_after_requests, sync=args.sync)
    return server.serve()
