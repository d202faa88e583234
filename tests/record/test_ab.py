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
