"""`clef-prof predict`: the serving change a compare's stage changes imply through a what-if's
slopes, beside a bench's measured change (clef_prof.whatif.predict)."""
from __future__ import annotations

import json

from .options import HelpFormatter, emit, import_numpy


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict", help="predicted vs measured: a PR's serving change from its stage changes and what-if slopes",
        formatter_class=HelpFormatter,
        description="From a compare of main vs a PR (clef-prof compare -f json: each stage's ms/request change "
                    "with its interval) and a what-if file measured on main (clef-prof whatif: each stage's "
                    "slope), predict each stage's share of the serving change and the total, with intervals "
                    "propagating both; with a bench of the same arms (clef-prof bench -f json), show "
                    "predicted beside measured and the part the stages leave unexplained.",
        epilog="examples:\n"
               "  clef-prof predict --whatif wi.json --compare cmp.json --bench bench.json\n"
               "  clef-prof predict --whatif wi.json --compare cmp.json --stages transfer,head")
    p.add_argument("--whatif", required=True, metavar="W.json", help="the what-if file (its observations)")
    p.add_argument("--compare", required=True, metavar="C.json", help="clef-prof compare's JSON, main vs the PR")
    p.add_argument("--bench", metavar="B.json", help="clef-prof bench's JSON of the same arms")
    p.add_argument("--case", help="the bench case to read (its label), where the bench has several")
    p.add_argument("--stages", help="comma-separated stages to predict from (default: every stage compared)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    p.add_argument("--format", "-f", choices=["table", "markdown", "json"], default="table",
                   help="table: terminal report (default); markdown: for a pull request; json: every figure")
    p.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    p.set_defaults(func=run)


def _json(path: str, what: str, schema: str) -> dict:
    from ..whatif.predict import PredictError

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise PredictError(f"--{what} {path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PredictError(f"--{what} {path}: not JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(schema):
        raise PredictError(f"--{what} {path}: not the JSON of clef-prof {what} (no {schema} schema)")
    if doc.get("status", "ok") != "ok":
        raise PredictError(f"--{what} {path}: that run did not finish (status {doc.get('status')!r})")
    return doc


def run(args) -> int:
    from ..whatif.predict import PredictError, predict
    from ..whatif.render import render_prediction
    from ..whatif.slopes import analyse
    from ..whatif.store import load

    import_numpy()
    if not 0.5 <= args.confidence < 1:
        raise PredictError(f"--confidence {args.confidence}: expected a fraction in [0.5, 1), e.g. 0.95")
    compare = _json(args.compare, "compare", "clef-prof/compare/")
    bench = _json(args.bench, "bench", "clef-prof/bench/") if args.bench else None
    observations, _ = load(args.whatif)
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip()) if args.stages else None
    if stages is not None and not stages:
        raise PredictError("--stages: name at least one stage")
    result = analyse(observations, confidence=args.confidence)
    pred = predict(observations, result, compare, stages=stages, bench=bench, case=args.case,
                   sources=(args.whatif, args.compare, args.bench))
    fmt = {"table": "text"}.get(args.format, args.format)
    emit(render_prediction(pred, fmt), args.output, [args.whatif, args.compare] + ([args.bench] if args.bench else []))
    return 0
