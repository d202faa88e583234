"""The spec's [request] table: request ranges and enqueue marks put into an unannotated program by
`clef-prof inject`, recorded with nsys 2023.4 and checked against the SQL oracle; the table's checks."""
from __future__ import annotations

import os
import sys

import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.annotate import spec as sp
from clef_prof.base.errors import SpecError
from conftest import ROOT
from journey_oracle import check, compute
from recording import profile

PROGRAMS = ROOT / "tests" / "programs"


@pytest.mark.nsys("2023.4")
def test_spec_request_table_under_nsys(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{PROGRAMS}"
    argv = [sys.executable, "-m", "clef_prof", "inject", "--spec", str(PROGRAMS / "journey.toml"), "--",
            sys.executable, "-m", "journey_app.server", "60"]
    db = profile(argv, tmp_path / "cap", "2023.4", env, PROGRAMS)
    cfg = sp.load(str(PROGRAMS / "journey.toml")).config
    a = analyze(str(db), cfg)
    check(a, compute(db))
    j = a.result.journey
    assert j.request_ranges == j.complete == 60 and j.without_enqueue == 0 and j.without_encode == 0
    assert sorted(a.journeys["rid"].tolist()) == sorted(f"q{i}" for i in range(60))


def _spec(request: dict) -> dict:
    return {"batch": {"target": "m:B.run"}, "stages": {"parse": "m:parse"}, "request": request}


def test_request_table_round_trips():
    s = sp.from_dict(_spec({"target": ["m:h1", "m:h2"], "id_header": "X-Request-Id", "enqueue": "m:E.add",
                            "enqueue_id_arg": "req.id"}))
    assert [(b.role, b.where, str(b.target)) for b in s.bindings()][-3:] == [
        ("request", "[request].target[0]", "m:h1"), ("request", "[request].target[1]", "m:h2"),
        ("enqueue", "[request].enqueue", "m:E.add")]
    assert sp.from_dict(s.to_dict()).request == s.request
    both = sp.from_dict(_spec({"target": "m:h", "id_header": "X-Request-Id", "header_arg": "raw",
                               "id_arg": "req.request_id", "engine_id_pattern": "^embd-(.+)-[0-9]+$"}))
    assert sp.from_dict(both.to_dict()).request == both.request
    assert both.config.engine_id_pattern == "^embd-(.+)-[0-9]+$" and s.config.engine_id_pattern is None
    b = both.bindings()[-1]
    assert (b.id_header, b.header_arg, b.id_arg) == ("X-Request-Id", "raw", "req.request_id")


@pytest.mark.parametrize("request_table, says", [
    ({"id_arg": "rid"}, "name the handler"),
    ({"target": "m:h"}, "needs id_arg"),
    ({"target": "m:h", "id_arg": "rid", "engine_id_pattern": "^e-.+$"}, "has 0 groups"),
    ({"target": "m:h", "id_arg": "rid", "engine_id_pattern": "^(e)-(.+)$"}, "has 2 groups"),
    ({"target": "m:h", "id_arg": "rid", "engine_id_pattern": "^(e"}, "is not a regular expression"),
    ({"target": "m:h", "id_arg": "rid", "engine_id_pattern": 3}, "must be a regular expression"),
    ({"target": "m:h", "id_header": "X Id"}, "HTTP header name"),
    ({"target": "m:h", "id_arg": "rid", "enqueue": "m:e"}, "needs enqueue_id_arg"),
    ({"target": "m:h", "id_arg": "rid", "enqueue_id_arg": "x"}, "without enqueue"),
    ({"target": "m:parse", "id_arg": "rid"}, "already the target"),
    ({"target": "m:h", "id_arg": "rid", "colour": 1}, "unknown keys in [request]: colour"),
])
def test_bad_request_tables(request_table, says):
    with pytest.raises(SpecError) as e:
        sp.from_dict(_spec(request_table))
    assert says in str(e.value)
