"""`clef-prof ab`: captures of several server arms, interleaved (clef_prof.record.ab)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..base.errors import ClefError
from ..record import manifest as mf
from ..record.ab import parse_arms, schedule
from ..record.session import record
from ..base.redact import redact_args
from .record import add_record_options, config_from


def add_parser(sub) -> None:
    p = sub.add_parser("ab", help="alternating captures of two server commands (fresh server each), for compare",
                       description="Alternating captures: `clef-prof ab --arm main=CMD --arm pr=CMD --rounds N "
                                   "--order ABBA --out DIR [record options]`.")
    _arguments(p)
    p.set_defaults(func=cmd_ab)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arm", action="append", default=[], metavar="NAME=COMMAND", required=True,
                   help="an arm and its server command (quoted; repeat for each arm, baseline first)")
    p.add_argument("--rounds", type=int, default=3,
                   help="captures per arm (default 3, the fewest compare judges: it needs 3 per arm)")
    p.add_argument("--order", choices=["ABBA", "AB"], default="ABBA",
                   help="ABBA: reverse the arm order every other round (default); AB: fixed order")
    p.add_argument("--pause", type=float, default=0.0, metavar="S", help="seconds between captures")
    p.add_argument("--keep-going", action="store_true", help="go on after a failed capture")
    add_record_options(p, out_help="folder of the ab run: one capture folder per arm and round (ROUND-ARM/, each "
                                   "with its report, SQLite export, logs and manifest.json) and the index ab.json; "
                                   "`clef-prof compare DIR` takes it whole")


def cmd_ab(args) -> int:
    arms = parse_arms(args.arm)
    if args.rounds < 1:
        raise ClefError("--rounds must be at least 1")
    if args.name != "capture" and "/" in args.name:
        raise ClefError("--name must be a file name")
    cmds = dict(arms)
    runs = schedule([a for a, _ in arms], args.rounds, args.order)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    index = {"schema": "clef-prof/ab/1", "arms": {a: c if args.keep_env else redact_args(c) for a, c in arms},
             "rounds": args.rounds, "order": args.order, "captures": []}
    failures = 0
    for i, (rnd, arm) in enumerate(runs):
        folder = os.path.join(out, f"{rnd}-{arm}")
        if not args.quiet:
            print(f"ab: capture {i + 1}/{len(runs)}: round {rnd}, arm {arm} -> {folder}", file=sys.stderr, flush=True)
        cfg = config_from(args, cmds[arm], out=folder)
        cfg.arm, cfg.round = arm, rnd
        entry = {"round": rnd, "arm": arm, "folder": os.path.relpath(folder, out)}
        try:
            if args.dry_run:
                record(cfg, dry_run=True)
                continue
            res = record(cfg)
            entry.update(status=res["status"], manifest=os.path.relpath(res["manifest"], out))
        except ClefError as exc:
            failures += 1
            entry.update(status="failed", error=str(exc))
            if os.path.exists(os.path.join(folder, mf.NAME)):
                entry["manifest"] = os.path.relpath(os.path.join(folder, mf.NAME), out)
            index["captures"].append(entry)
            mf.write(index, out, "ab.json")
            if not args.keep_going:
                raise ClefError(f"ab: capture {rnd}-{arm} failed: {exc}") from None
            print(f"ab: capture {rnd}-{arm} failed: {exc}", file=sys.stderr)
            continue
        index["captures"].append(entry)
        mf.write(index, out, "ab.json")
        if args.pause and i + 1 < len(runs):
            time.sleep(args.pause)
    if args.dry_run:
        return 0
    ok = sum(1 for c in index["captures"] if c.get("status") == "ok")
    print(f"ab: {ok} of {len(runs)} captures in {out} (index: {os.path.join(out, 'ab.json')}); "
          f"next: clef-prof compare {args.out}")
    return 1 if failures else 0
