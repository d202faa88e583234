"""`clef-prof ab`'s plan (clef_prof.record.ab): the run order of the arms and the parsing of --arm."""
from __future__ import annotations

import pytest

from clef_prof.record import ab


def test_ab_schedule_and_arms():
    assert ab.schedule(["main", "pr"], 2, "ABBA") == [(1, "main"), (1, "pr"), (2, "pr"), (2, "main")]
    assert ab.schedule(["main", "pr"], 2, "AB") == [(1, "main"), (1, "pr"), (2, "main"), (2, "pr")]
    arms = ab.parse_arms(["main=python -m s --variant main", "pr=python -m s 'a b'"])
    assert arms == [("main", ["python", "-m", "s", "--variant", "main"]), ("pr", ["python", "-m", "s", "a b"])]
    for bad in (["main=x"], ["main", "pr=x"], ["m/a=x", "pr=y"], ["a=x", "a=y"]):
        with pytest.raises(Exception):
            ab.parse_arms(bad)


def test_ab_default_rounds_give_compare_enough_captures(tmp_path, capsys):
    """Without --rounds, ab plans 3 captures per arm: compare judges from 3 per arm on (2 gave
    'too few captures to judge' every time)."""
    from clef_prof.cli.app import main
    from clef_prof.compare.welch import MIN_UNITS

    assert main(["ab", "--arm", "main=srv --variant main", "--arm", "pr=srv --variant pr", "--out",
                 str(tmp_path / "ab"), "--dry-run", "--window", "nsys"]) == 0
    planned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("ab: capture ")]
    assert [ln.split(" -> ")[1].rsplit("/", 1)[1] for ln in planned] == \
        ["1-main", "1-pr", "2-pr", "2-main", "3-main", "3-pr"]
    assert sum(ln.endswith("-pr") for ln in planned) == MIN_UNITS          # what compare needs per arm
