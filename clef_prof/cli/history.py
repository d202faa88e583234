"""`clef-prof history`: results over time (clef_prof.history): the store, trends, change points, the
CI gate; and the --store hook of analyze, compare and bench."""
from __future__ import annotations

import json
import os
import sys

from ..base.errors import EXIT_NOT_JUDGED, ClefError, shown
from .options import HelpFormatter, emit, say



def add_parser(sub) -> None:
    p = sub.add_parser(
        "history", help="results over time: store analyze/compare/bench results, trends, change points, a CI gate",
        formatter_class=HelpFormatter,
        description="Read a history store: every metric's series in time order and its change points (e-divisive "
                    "means; exact counts change exactly), each with its size, interval and commit range. "
                    "`history add DB FILE.json ...` stores results already written (analyze/compare/bench -f json); "
                    "analyze, compare and bench store theirs with --store DB. Commit and branch come from "
                    "--commit/--branch, else $CLEF_PROF_COMMIT/$CLEF_PROF_BRANCH or the CI's variables (GITHUB_SHA, "
                    "CI_COMMIT_SHA, ...), else `git rev-parse` in the working folder, else are absent.",
        epilog="examples:\n"
               "  clef-prof analyze runs/pr -f json --store history.db\n"
               "  clef-prof history add history.db report.json --commit $(git rev-parse HEAD)\n"
               "  clef-prof history history.db --branch main\n"
               "  clef-prof history history.db \\\n"
               "      --fail-if-new-change 'stages.*.host_ms_per_request,per_request.h2d_copies'\n"
               "  clef-prof history history.db --html trends.html\n\n"
               "exit 1: a gated series has a new change point; 3: a gated series is too short to judge")
    p.add_argument("words", nargs="+", metavar="DB | add DB FILE.json",
                   help="the store to read; or `add`, the store, and the result files to add (- for stdin)")
    g = p.add_argument_group("which results (add: what to store them as)")
    g.add_argument("--branch", help="read: only this branch's results; add: the branch to store")
    g.add_argument("--host", help="read: only this host's results; add: the host to store (default: this host name)")
    g.add_argument("--commit", help="add: the commit to store")
    g.add_argument("--time", help="add: the results' time, ISO 8601 (default now; UTC when no zone is given)")
    g.add_argument("--kind", choices=["analyze", "compare", "bench"], help="read: only results of this command")
    g.add_argument("--metric", action="append", metavar="GLOB",
                   help="read: only metrics matching (repeat; e.g. 'stages.*.host_ms_per_request')")
    s = p.add_argument_group("change points and the gate")
    s.add_argument("--last", type=int, default=100, metavar="N",
                   help="the newest N results of each series are analysed (default 100; 0: all)")
    s.add_argument("--sig-level", type=float, default=0.01, metavar="P",
                   help="significance level of each split, per series (default 0.01)")
    s.add_argument("--seed", type=int, default=0, help="seed of the permutation tests (default 0)")
    s.add_argument("--fail-if-new-change", metavar="METRIC,...", dest="fail_if_new_change", action="append",
                   help="exit 1 when the newest results (those of the newest commit) start a change point that "
                        "the series without them does not have, in any of these metrics (comma-separated; globs)")
    o = p.add_argument_group("output")
    o.add_argument("--format", "-f", choices=["table", "markdown", "json"], default="table",
                   help="table (default), markdown, or json (the contract in docs/json.md)")
    o.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    o.add_argument("--html", metavar="OUT.html", help="also write the trend page: one chart per metric")
    p.set_defaults(func=run)


def run(args) -> int:
    words = args.words
    if words[0] == "add" and (len(words) > 1 or not os.path.exists("add")):
        if len(words) < 3:
            raise ClefError("history add: give the store and at least one result file: history add DB FILE.json ...")
        return _add(args, words[1], words[2:])
    if len(words) != 1:
        raise ClefError("history: give one store to read (history DB), or add results: history add DB FILE.json ...")
    for opt in ("commit", "time"):
        if getattr(args, opt):
            raise ClefError(f"history: --{opt} is what `history add` stores; reading a store takes no --{opt}")
    return _report(args, words[0])


def _read_results(name: str) -> list[tuple[dict, str]]:
    """The results in one file (a JSON object, or a list of them: analyze of several captures)."""
    from ..history.figures import PayloadError, describe

    if name == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        from ..base.safeio import check_regular
        check_regular(name, "result file")
        try:
            with open(name, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ClefError(f"{shown(name)}: cannot read ({getattr(exc, 'strerror', None) or exc}); nothing stored") \
                from None
        where = name
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ClefError(f"{shown(name)}: not JSON ({exc}); nothing stored") from None
    docs = doc if isinstance(doc, list) else [doc]
    for i, d in enumerate(docs):
        try:
            describe(d)
        except PayloadError as exc:
            at = f" (item {i + 1})" if isinstance(doc, list) else ""
            raise ClefError(f"{shown(name)}{at}: {exc}; nothing stored") from None
    return [(d, where) for d in docs]


def _add(args, db: str, files: list[str]) -> int:
    from ..history.store import add, provenance

    payloads = [r for f in files for r in _read_results(f)]
    if not payloads:
        raise ClefError("history add: the files hold no results (an empty list); nothing stored")
    prov = provenance(args.commit, args.branch, args.host, args.time)
    print(_stored_line(db, add(db, payloads, prov), prov))
    return 0


def _stored_line(db: str, added, prov) -> str:
    new = [a for a in added if not a.duplicate]
    dup = [a for a in added if a.duplicate]
    ids = ", ".join(f"#{a.id}" for a in new)
    line = f"stored {len(new)} result(s) in {shown(db)}{f' as {ids}' if new else ''} ({prov.describe()})"
    if dup:
        line += f"; {len(dup)} already stored ({', '.join(f'#{a.id}' for a in dup)}): not added again"
    return line


def _report(args, db: str) -> int:
    from ..history import render, store, trends

    if args.last < 0:
        raise ClefError(f"--last {args.last}: expected a number of results, 0 (all) or more")
    if not 0 < args.sig_level < 0.5:
        raise ClefError(f"--sig-level {args.sig_level}: expected a level in (0, 0.5), e.g. 0.01")
    if args.seed < 0:
        raise ClefError(f"--seed {args.seed}: expected a whole number, 0 or more")
    gate = [m.strip() for spec in args.fail_if_new_change or [] for m in spec.split(",") if m.strip()]
    if args.fail_if_new_change is not None and not gate:
        raise ClefError("--fail-if-new-change: name at least one metric (comma-separated; globs allowed)")
    for out in (args.output, args.html):
        if out:
            from ..base.safeio import check_output
            check_output(out, [db])
    if args.output and args.html and os.path.realpath(args.output) == os.path.realpath(args.html):
        raise ClefError(f"{shown(args.html)}: named by both -o and --html")
    from .options import import_numpy
    import_numpy()
    rows = store.read_rows(db, branch=args.branch, host=args.host, kind=args.kind)
    filters = {"branch": args.branch, "host": args.host, "kind": args.kind}
    h = trends.analyse(db, rows, store.count_results(db), last=args.last, metrics=args.metric,
                       sig_level=args.sig_level, seed=args.seed, gate_metrics=gate or None, filters=filters)
    if args.format == "json":
        emit(render.render_json(h), args.output, [db])
    elif args.format == "markdown":
        emit(render.render_markdown(h), args.output, [db])
    else:
        emit(render.render_terminal(h, 100_000 if args.output else None), args.output, [db])
    if args.html:
        from ..history.page import write_page
        write_page(h, args.html, [db])
        say(f"wrote {args.html}: {len(h.series)} charts")
    for line in render.gate_lines(h):
        say(f"clef-prof: {line}")
    if h.gate is not None:
        if h.gate.fired:
            return 1
        if h.gate.unjudged or not h.gate.lines:
            return EXIT_NOT_JUDGED
    return 0


# ---------------------------------------------------------------------------------------------
# the --store hook of analyze, compare and bench


def add_store_option(p) -> None:
    p.add_argument("--store", metavar="DB", help="also append the result to this history store (SQLite, made when "
                   "absent; commit and branch from $CLEF_PROF_COMMIT/$CLEF_PROF_BRANCH, the CI's variables or git; "
                   "read it with clef-prof history DB)")


def check_store(args) -> None:
    """Before any work: a --store that exists must be a store this clef-prof writes, and not -o."""
    db = getattr(args, "store", None)
    if not db:
        return
    if getattr(args, "output", None) and os.path.realpath(args.output) == os.path.realpath(db):
        raise ClefError(f"{shown(db)}: named by both -o and --store")
    from ..history.store import StoreError, open_read

    if os.path.lexists(db):
        open_read(db).close()
    elif not os.path.isdir(os.path.dirname(os.path.abspath(db))):
        raise StoreError(f"{shown(db)}: the folder {shown(os.path.dirname(db) or '.')} does not exist")


def store_results(args, command: str, payloads: list) -> None:
    """After the report: append `payloads` (JSON-ready results) to --store, and say so on stderr."""
    db = getattr(args, "store", None)
    if not db:
        return
    from ..history.store import add, provenance

    docs = json.loads(json.dumps(payloads, default=_plain))    # as the JSON contract prints them
    prov = provenance()
    say(f"clef-prof: {_stored_line(db, add(db, [(d, f'{command} --store') for d in docs], prov), prov)}")


def _plain(v):
    """NumPy scalars and arrays as JSON values (json.dumps' default)."""
    if hasattr(v, "tolist"):
        return v.tolist()
    raise TypeError(f"{type(v).__name__} is not JSON")
