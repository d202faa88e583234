"""`clef-prof ab`: alternating captures of two (or more) server commands, a fresh server each.

    clef-prof ab --arm main='python -m server --old' --arm pr='python -m server --new' \\
                 --rounds 2 --order ABBA --out runs/ab [record options]
    clef-prof compare runs/ab

Each round captures every arm once; with --order ABBA the order flips every round
(main, pr | pr, main | ...), so that a slow drift of the machine (thermal, caches, other
tenants) falls on both arms alike; --order AB keeps it fixed. Every capture is a full
`clef-prof record` run: a fresh server, its own warm-up, window, export and manifest, in
DIR/<round>-<arm>/ (manifest.json carries "arm", "round" and "export"), which is the layout
`clef-prof compare DIR` reads. DIR/ab.json lists the captures in the order they ran.

Standard library only.
"""
from __future__ import annotations

import re
import shlex

from ..base.errors import ClefError

_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def parse_arms(specs: list[str]) -> list[tuple[str, list[str]]]:
    arms = []
    for spec in specs:
        name, sep, cmd = spec.partition("=")
        name = name.strip()
        if not sep or not name or not cmd.strip():
            raise ClefError(f"--arm {spec!r}: expected NAME=COMMAND, e.g. --arm main='clef-prof demo-server --variant main'")
        if not _ARM_NAME.match(name):
            raise ClefError(f"--arm {spec!r}: the arm name must be letters, digits, '.', '_' or '-'")
        try:
            argv = shlex.split(cmd)
        except ValueError as exc:
            raise ClefError(f"--arm {name}: cannot split the command ({exc})") from None
        if name in (a for a, _ in arms):
            raise ClefError(f"--arm {name} given twice")
        arms.append((name, argv))
    if len(arms) < 2:
        raise ClefError("ab: give at least two arms (--arm main=CMD --arm pr=CMD)")
    return arms


def schedule(names: list[str], rounds: int, order: str) -> list[tuple[int, str]]:
    """(round, arm) in run order. ABBA: the arm order is reversed every other round."""
    out = []
    for r in range(1, rounds + 1):
        seq = list(names)
        if order.upper() == "ABBA" and r % 2 == 0:
            seq.reverse()
        out += [(r, a) for a in seq]
    return out
