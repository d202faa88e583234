"""`clef-prof demo`: the guided path. Records the demo server's main and pr on the machine at hand,
analyzes both, compares them and writes the HTML report, saying before each output what it shows.

Each step is the command a user would type (printed with `$`), run through the same CLI, so the
tour teaches the commands as it goes. On a machine without a CUDA GPU it says, before any figure,
why pr's pinned copies cannot win there and what the CPU run does show."""
from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys

from ..base.errors import ClefError
from ..explore.termtable import width as term_width, wrap
from .options import HelpFormatter

INTRO = ("The demo server (clef-prof demo-server) is a pooling server with the five stages parse, index, "
         "transfer, head and encode, each an NVTX range inside one 'pooler n=K' range per batch. Its two variants "
         "differ in transfer: main copies 9 small tensors per request to the GPU from pageable memory, blocking; "
         "pr packs the same 3,424 bytes into 3 pinned buffers copied asynchronously. This tour records each "
         "under Nsight Systems, analyzes both captures, compares them and writes the HTML report.")
GPU = ("This machine has a CUDA GPU: the server ran its torch path. Expect pr to make 3 H2D copies per request "
       "instead of main's 9 (all pinned instead of pageable), to spend less host time in transfer, and the "
       "pageable-h2d and sync-in-stage findings of main to be resolved in pr.")
CPU = ("This machine has no CUDA GPU, so the server ran its CPU path, and what pr changes cannot pay off here. "
       "Pinned memory and asynchronous copies only help a copy that crosses to a GPU: there each of main's 9 small "
       "pageable copies goes through a staging buffer and blocks the host, which pr's 3 pinned ones avoid. On a "
       "CPU there is no device to copy to: pr's packing is extra Python work with nothing to save, so expect its "
       "transfer to be no faster, and possibly slower. What the CPU run does show: the whole tool chain (record, "
       "analyze, compare, report), the host time per stage per request, the batch sizes, and how compare reads "
       "a change with one capture per arm. The CUDA figures (H2D copies, kernels, GPU "
       "overlap) need a GPU: they are absent here, not zero.")
READ_ANALYZE = ("How to read analyze: the first line counts the requests and batches in the capture. The table "
                "gives per stage the host ms per request (the stage's total host time over all requests), its "
                "mean share of the batch's host span, and on a GPU the H2D copies and kernel launches per request. "
                "Then the transfers and GPU overlap, the findings (rules over these figures, each with a fix and "
                "the effect to expect), and the capture's details. --wide shows every figure.")
READ_COMPARE = ("How to read compare: per metric, main's value, pr's, the change in %, its 95% interval and the "
                "verdict. A capture is the unit that varies from run to run, so a verdict ('beyond noise' when "
                "Welch's interval between the arms' captures excludes 0, else 'within noise') needs 3 captures per "
                "arm; with one per arm, as here, each timing says 'too few captures to judge' and its interval is "
                "the within-capture one (batch-to-batch noise within one run only). Counts that are one multiple of "
                "the batch size in every batch are 'exact'. The findings say which of main's problems pr resolved.")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo", help="guided tour: record the demo server's main and pr here, analyze, compare, write the report",
        formatter_class=HelpFormatter,
        description="Record the built-in demo server's two variants (main: 9 pageable H2D copies per request; pr: 3\n"
                    "pinned ones) under Nsight Systems on this machine, analyze both captures, compare them and\n"
                    "write the HTML report, explaining each output. Needs nsys (.nsys/ or PATH); a few minutes.",
        epilog="examples:\n"
               "  clef-prof demo\n"
               "  clef-prof demo --out runs/tour --duration 5")
    p.add_argument("--out", "-o", default=os.path.join("runs", "demo"),
                   help="folder for the two captures and report.html (default runs/demo)")
    p.add_argument("--duration", type=float, default=3.0, metavar="S", help="seconds of load per capture (default 3)")
    p.add_argument("--warmup", type=float, default=2.0, metavar="S", help="seconds of warm-up before each (default 2)")
    p.add_argument("--nsys", help="the nsys to record with (default: as record finds it)")
    p.set_defaults(func=cmd_demo)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmd_demo(args) -> int:
    from ..base.nsys import locate
    from .app import main

    if args.duration <= 0 or args.warmup < 0:
        raise ClefError("demo: --duration must be positive and --warmup not negative")
    nsys = locate(args.nsys)            # no nsys: one line saying how to get one, before anything runs
    width = term_width()

    def say(text: str = "") -> None:
        print("\n".join(wrap(text, width)) if text else "", flush=True)

    def step(title: str, argv: list[str]) -> None:
        say()
        say(f"== {title}")
        # the command as a shell would take it, continued with `\` at arguments' ends (never
        # inside one) to stay within the width
        lines, line = [], "$ clef-prof"
        for word in map(shlex.quote, argv):
            if len(line) + 1 + len(word) + 2 > width and line.strip():
                lines.append(line + " \\")
                line = "    " + word
            else:
                line += " " + word
        print("\n".join([*lines, line]), flush=True)

    say(INTRO)
    for variant in ("main", "pr"):
        port = _free_port()
        out = os.path.join(args.out, variant)
        server = [sys.executable, "-m", "clef_prof", "demo-server", "--variant", variant, "--port", str(port),
                  "--quiet"]
        argv = ["record", "--out", out, "--quiet", "--nsys", nsys, "--url", f"http://127.0.0.1:{port}",
                "--warmup", f"{args.warmup:g}", "--duration", f"{args.duration:g}", "--", *server]
        step(f"record {variant}: the demo server under nsys, {args.warmup:g} s warm-up, {args.duration:g} s of load",
             argv)
        # record runs in a child: its signal handling and process groups stay its own
        code = subprocess.run([sys.executable, "-m", "clef_prof", *argv]).returncode
        if code:
            print(f"clef-prof: error: demo: recording {variant} failed (exit {code}); see above", file=sys.stderr)
            return code
    say()
    say(GPU if _device(os.path.join(args.out, "pr")) == "cuda" else CPU)
    for variant in ("main", "pr"):
        argv = ["analyze", os.path.join(args.out, variant)]
        step(f"analyze {variant}", argv)
        if variant == "main":
            say(READ_ANALYZE)
            say()
        main(argv)
    argv = ["compare", "--arm", f"main={os.path.join(args.out, 'main')}", "--arm",
            f"pr={os.path.join(args.out, 'pr')}"]
    step("compare main and pr", argv)
    say(READ_COMPARE)
    code = main(argv)
    if code:
        return code
    html = os.path.join(args.out, "report.html")
    argv = ["report", os.path.join(args.out, "pr"), "--html", html]
    step("report: one self-contained HTML page of pr", argv)
    code = main(argv)
    if code:
        return code
    say()
    say(f"Open {html} in a browser: the figures above, and a timeline of consecutive batches with every stage, "
        "copy and kernel. Next: clef-prof ab --rounds 3 records 3 captures per arm, the least that gives compare "
        "a verdict on run-to-run noise, and docs/profile-your-own-server.md does all this for a server of your own.")
    return 0


def _device(folder: str) -> str | None:
    """The device the demo server ran on, from the record manifest (its /version answer)."""
    try:
        with open(os.path.join(folder, "manifest.json")) as fh:
            return ((json.load(fh).get("server") or {}).get("info") or {}).get("device")
    except (OSError, ValueError):
        return None
