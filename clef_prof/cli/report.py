"""`clef-prof report`: one self-contained HTML page (clef_prof.explore.html, pictures in SVG)."""
from __future__ import annotations

import os
import sys

from ..base.errors import ClefError


def add_parser(sub) -> None:
    from .options import add_stage_options

    p = sub.add_parser("report", help="a self-contained HTML report of one capture: tables, timeline, distributions",
                       description="Write one HTML file (SVG pictures inline, no external resources) for a capture.")
    p.add_argument("capture", metavar="CAPTURE", help="nsys SQLite export, .nsys-rep report, record manifest or folder")
    p.add_argument("--html", required=True, metavar="OUT.html", help="the HTML file to write")
    p.add_argument("--batches", type=int, default=4, metavar="N", help="batches in the timeline (default 4)")
    p.add_argument("--first-batch", type=_which, default=0, metavar="I|slowest|p99",
                   help="first batch of the timeline, 0-based on its thread (default 0; negative counts from the "
                        "end), or slowest (the longest batch range) or p99 (the batch at the 99th percentile of "
                        "their durations)")
    add_stage_options(p)
    p.set_defaults(func=run)


def _which(text: str):
    import argparse

    if text in ("slowest", "p99"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a batch number, slowest or p99") from None


def run(args) -> int:
    from .options import stage_config
    from ..analyze.read.inputs import resolve
    from ..analyze.pipeline import analyze
    from ..explore.html import write_html

    if args.batches < 1:
        raise ClefError(f"--batches {args.batches}: at least 1")
    from ..base.safeio import check_output

    path, recorded = resolve(args.capture)
    inputs = [args.capture, path, *([args.spec] if args.spec else [])]
    check_output(args.html, inputs)
    # one pass without row-level tables; the timeline reads its window's rows (issue 13)
    cap = analyze(path, stage_config(args, [(args.capture, recorded, path)]), requests=args.requests)
    if cap.result.batches:
        from ..explore.svg import first_batch

        args.first_batch = first_batch(cap, args.first_batch)      # one line, before anything is written
    write_html(cap, args.html, inputs, first_batch=args.first_batch, n_batches=args.batches)
    size = os.path.getsize(args.html)
    print(f"wrote {args.html}: {size / 1024:.0f} KiB, {cap.result.batches} batches, "
          f"{len(cap.warnings)} warning(s)", file=sys.stderr)
    return 0
