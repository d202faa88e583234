"""`clef-prof scrub`: remove secrets and host facts from an export (clef_prof.capture.scrub)."""
from __future__ import annotations

import sys

from ..capture.scrub import check_file_for_secrets, grouped, print_report, scrub_file
from ..explore.termtable import width, wrap
from ..base.errors import ClefError


def add_parser(sub) -> None:
    p = sub.add_parser("scrub", help="copy an export without what can carry a secret (environment, arguments, "
                       "key-like tokens, host and user names), or --check one",
                       description="Write OUT, a copy of the export IN without environment blocks, command-line "
                       "arguments, secret-named flags' values, key-like tokens, host/user names and process "
                       "output, passwords in URLs, headers and command lines, private keys; request ids "
                       "and the user names in /home/<user>/, /Users/<user>/ paths become stable pseudonyms "
                       "([rid-1], [user-1]), so every figure of analyze stays the same. Prints what was "
                       "removed (counts per table and rule, never values). With --check FILE: exit 1 and "
                       "list what looks like a secret, grouped by rule and place (table.column) with a few "
                       "rowids (--all: one line per value), exit 0 when clean. The input is only read. "
                       "Example: clef-prof scrub runs/pr/capture.sqlite shared.sqlite")
    p.add_argument("capture", metavar="IN.sqlite", nargs="?",
                   help="nsys SQLite export, or a PyTorch profiler trace (scrubbed as its SQLite conversion); read only")
    p.add_argument("output", metavar="OUT.sqlite", nargs="?", help="new scrubbed SQLite file")
    p.add_argument("--check", metavar="FILE", help="only check FILE: exit 1 when something looks like a secret")
    p.add_argument("--all", action="store_true", help="with --check: one line per value (table.column rowid: rule)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.check:
        if args.capture or args.output:
            raise ClefError("scrub --check FILE takes no other paths")
        found = check_file_for_secrets(args.check)
        if args.all:
            for f in found:
                print(f"{args.check}: {f.table}.{f.column} rowid {f.rowid}: {f.rule}")
        elif found:
            groups = grouped(found)
            wr, wp = max(len(g.rule) for g in groups), max(len(g.place) for g in groups)
            cols = width()
            lines = wrap(f"{args.check}: {len(found)} value(s) by rule and place (rule, table.column, values, "
                       "first rowids):", cols, "  ")
            for g in groups:
                more = ", ..." if g.count > len(g.rowids) else ""
                lines += wrap(f"  {g.rule:<{wr}}  {g.place:<{wp}}  {g.count:>7}  rowid {', '.join(map(str, g.rowids))}"
                            f"{more}", cols, " " * (wr + wp + 15 if cols - (wr + wp + 15) >= 20 else 4))
            print("\n".join(lines))
        if found:
            print(f"clef-prof: scrub --check: {len(found)} value(s) may carry secrets "
                  f"(clef-prof scrub IN OUT removes them)", file=sys.stderr)
            return 1
        print(f"{args.check}: clean")
        return 0
    if args.all:
        raise ClefError("scrub: --all goes with --check FILE")
    if not (args.capture and args.output):
        raise ClefError("scrub: give IN.sqlite OUT.sqlite, or --check FILE")
    info = scrub_file(args.capture, args.output)
    print_report(info["scrubbed"])
    print(f"wrote {args.output}: {info['bytes'] / 1e6:.2f} MB")
    return 0
