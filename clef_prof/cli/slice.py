"""`clef-prof slice`: cut an export to a time window (clef_prof.capture.slicing)."""
from __future__ import annotations

from ..capture.slicing import slice_capture
from ..explore.termtable import width, wrap
from ..base.errors import CaptureError


def add_parser(sub) -> None:
    p = sub.add_parser("slice", help="cut a time window of an export into a new, smaller, consistent, scrubbed export",
                       description="Write OUT, the window --from..--to (seconds from the session start) of the "
                       "export IN: ranges, API calls and their GPU rows wholly inside the window (a range cut "
                       "by an edge takes the ranges nested in it along), strings and metadata whole, times "
                       "shifted so that the window is OUT's session. OUT is scrubbed as `clef-prof scrub` "
                       "does (secrets, environment, arguments, host and user names removed; request ids and "
                       "home-folder user names replaced by stable pseudonyms, so the figures do not change); "
                       "the input is only read and OUT appears only when complete. "
                       "Example: clef-prof slice capture.sqlite small.sqlite --from 2 --to 3")
    p.add_argument("capture", metavar="IN.sqlite", help="input nsys SQLite export (read only)")
    p.add_argument("output", metavar="OUT.sqlite", help="new SQLite file (scrubbed)")
    p.add_argument("--from", dest="t0", type=float, required=True, help="window start, s from session start")
    p.add_argument("--to", dest="t1", type=float, required=True, help="window end, s from session start")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import math

    from ..capture.scrub import print_report

    for flag, v in (("--from", args.t0), ("--to", args.t1)):
        if not math.isfinite(v):
            raise CaptureError(f"slice: {flag} {v}: expected a number of seconds")
    t0, t1 = (int(min(max(v, -1e9), 1e9) * 1e9) for v in (args.t0, args.t1))
    info = slice_capture(args.capture, args.output, t0, t1)
    print_report(info["scrubbed"])
    a, b = info["window_ns"]
    print("\n".join(wrap(f"wrote {args.output}: {info['bytes'] / 1e6:.2f} MB, window {a / 1e9:g}..{b / 1e9:g} s of "
                         f"the input (the slice's session: 0..{(b - a) / 1e9:g} s)", width(), "  ")))
    return 0
