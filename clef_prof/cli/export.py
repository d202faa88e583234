"""`clef-prof export`: a capture's request journeys as Chrome Trace Event JSON and as CSV."""
from __future__ import annotations

import json

from ..base.errors import ClefError
from .options import say


def add_parser(sub) -> None:
    from ..base.defaults import DEFAULT_BATCH, DEFAULT_DOMAIN

    p = sub.add_parser(
        "export", help="request journeys as Chrome trace JSON (Perfetto) with flow arrows to their batches, or CSV",
        description="Write the request journeys of a capture (request ranges from clef_prof.request, joined to "
                    "their batches; docs/journey.md): --chrome-trace OUT.json holds the requests, their segments, "
                    "their batches' stages and the CUDA work launched in them, with a flow arrow from each request "
                    "to its batch (open it in ui.perfetto.dev); --csv OUT.csv one row per request range. "
                    "Example: clef-prof export --chrome-trace trace.json --requests p50,p99 runs/pr")
    p.add_argument("capture", metavar="CAPTURE", help="nsys SQLite export, .nsys-rep, record manifest.json or folder")
    p.add_argument("--chrome-trace", metavar="OUT.json", help="write the Chrome Trace Event JSON here")
    p.add_argument("--csv", metavar="OUT.csv", help="write one row per request range here")
    p.add_argument("--requests", default="all", metavar="WHICH",
                   help="requests in the Chrome trace: all (default), complete, p50, p99 (the p99+ tail), or "
                        "request ids; comma-separated, e.g. p50,p99")
    g = p.add_argument_group("stage ranges")
    g.add_argument("--spec", help="stage spec TOML naming domain, batch range and stages")
    g.add_argument("--domain", help=f"NVTX domain of the ranges (default {DEFAULT_DOMAIN!r})")
    g.add_argument("--batch", help=f"name of the outer batch range (default {DEFAULT_BATCH!r})")
    g.add_argument("--stages", help="comma-separated stage names")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from .options import import_numpy, stage_config
    from ..analyze.read.inputs import resolve
    from ..base.safeio import check_output, write_text

    import contextlib
    import os

    from .options import import_numpy, stage_config
    from ..analyze.read.inputs import resolve
    from ..base.safeio import atomic_output, check_output

    if not (args.chrome_trace or args.csv):
        raise ClefError("export: give --chrome-trace OUT.json and/or --csv OUT.csv")
    if args.chrome_trace and args.csv and os.path.realpath(args.chrome_trace) == os.path.realpath(args.csv):
        raise ClefError(f"export: --chrome-trace and --csv name the same file ({args.csv}); give each its own")
    import_numpy()
    path, recorded = resolve(args.capture)
    inputs = [args.capture, path, *([args.spec] if args.spec else [])]
    for out in (args.chrome_trace, args.csv):
        if out:
            check_output(out, inputs)
    from ..analyze.figures import journey as jn
    from ..analyze.pipeline import analyze

    analysis = analyze(path, stage_config(args, [(args.capture, recorded, path)]))
    rows = analysis.journeys
    if rows is None:
        raise ClefError(f"{path}: no request ranges (`request rid=ID` in domain {analysis.config.domain!r}); "
                        "annotate handlers with clef_prof.request or a spec's [request] table (docs/journey.md)")
    texts, said = {}, []
    if args.csv:
        from ..explore.text import render_journeys_csv
        texts[args.csv] = render_journeys_csv(rows)
        said.append(f"wrote {args.csv}: {len(rows):,} request ranges")
    if args.chrome_trace:
        try:
            pick = jn.select(rows, args.requests)
        except ValueError as exc:
            raise ClefError(f"export --requests {args.requests}: {exc}") from None
        doc = chrome_trace(analysis, pick)
        texts[args.chrome_trace] = json.dumps(doc, separators=(",", ":")) + "\n"
        said.append(f"wrote {args.chrome_trace}: {len(pick):,} requests, {doc['otherData']['batches']:,} batches, "
                    f"{len(doc['traceEvents']):,} events")
    # both files written to temporary names first and renamed together at the end: an export
    # interrupted (Ctrl-C, SIGTERM, a full disk) while writing either leaves neither behind
    with contextlib.ExitStack() as stack:
        for out, text in texts.items():
            tmp = stack.enter_context(atomic_output(out, inputs))
            try:
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(text)
            except OSError as exc:
                raise ClefError(f"{out}: cannot write ({exc.strerror or exc})") from None
    for line in said:
        print(line)
    for w in analysis.result.warnings:
        say(f"warning: {w}")
    return 0


def chrome_trace(analysis, pick) -> dict:
    """The Chrome trace of the journeys `pick` (row indices of `analysis.journeys`)."""
    import numpy as np

    from ..explore.chrome import trace
    from ..explore.frames import Capture

    rows = analysis.journeys[pick]
    st = analysis.stages
    gpu = None
    bsel = np.unique(rows["batch"][rows["batch"] >= 0])
    if analysis.result.capture.cuda_traced and len(bsel):
        b = st.batches
        t0, t1 = int(b["start"][bsel].min()), int(rows["end"][rows["batch"] >= 0].max())
        gpu = analysis.window(t0, t1)["gpu_busy"]
    tnames, pnames = Capture(analysis)._names
    threads = {((int(g) >> 24) & 0xFFFFFF, int(g) & 0xFFFFFF): n for g, n in tnames.items() if n}
    return trace(rows, st.batches, st.instances, gpu, {"process": pnames, "thread": threads},
                 list(analysis.result.slots))
