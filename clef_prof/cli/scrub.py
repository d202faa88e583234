"""`clef-prof scrub`: remove secrets and host facts from an export (clef_prof.analyze.scrub)."""
from __future__ import annotations

import sys

from ..analyze.scrub import check_file_for_secrets, print_report, scrub_file
from ..errors import ClefError


def add_parser(sub) -> None:
    p = sub.add_parser("scrub", help="copy an export without what can carry a secret (environment, arguments, "
                       "key-like tokens, host and user names), or --check one",
                       description="Write OUT, a copy of the export IN without environment blocks, command-line "
                       "arguments, secret-named flags' values, key-like tokens, host/user names and process "
                       "output; print what was removed (counts per table and rule, never values). "
                       "With --check FILE: exit 1 and list table/column/rowid/rule of what looks like a "
                       "secret, exit 0 when clean. Example: clef-prof scrub runs/pr/capture.sqlite shared.sqlite")
    p.add_argument("capture", metavar="IN.sqlite", nargs="?", help="nsys SQLite export (read only)")
    p.add_argument("output", metavar="OUT.sqlite", nargs="?", help="new scrubbed SQLite file")
    p.add_argument("--check", metavar="FILE", help="only check FILE: exit 1 when something looks like a secret")
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.check:
        if args.capture or args.output:
            raise ClefError("scrub --check FILE takes no other paths")
        found = check_file_for_secrets(args.check)
        for f in found:
            print(f"{args.check}: {f.table}.{f.column} rowid {f.rowid}: {f.rule}")
        if found:
            print(f"clef-prof: scrub --check: {len(found)} value(s) may carry secrets "
                  f"(clef-prof scrub IN OUT removes them)", file=sys.stderr)
            return 1
        print(f"{args.check}: clean")
        return 0
    if not (args.capture and args.output):
        raise ClefError("scrub: give IN.sqlite OUT.sqlite, or --check FILE")
    info = scrub_file(args.capture, args.output)
    print_report(info["scrubbed"])
    print(f"wrote {args.output}: {info['bytes'] / 1e6:.2f} MB")
    return 0
