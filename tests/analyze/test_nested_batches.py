"""Batch ranges inside batch ranges count once, as the outermost (a real recording, nsys 2023.4 on
the CPU, of tests/programs/nested_batches.py under `clef-prof inject --spec nested.toml`): an
annotation plus an injected spec on one function, a batch target calling another, an async batch
inside another of the same message; and two concurrent tasks' batches on one event loop, one
inside the other's span, which are two batches. The oracle is the program's own list of the
batches it served (sizes of the outermost ones) and SQL counts of the ranges recorded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.annotate import envform
from conftest import sql

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
STAGES = ("parse", "index", "transfer", "head", "encode")
ROUNDS = 4



@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    from recording import profile

    tmp = tmp_path_factory.mktemp("nested")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    base["PYTHONPATH"] = str(ROOT)          # the program imports clef_prof for its own annotations
    env = {**base, **envform.environment(str(PROGRAMS / "nested.toml"), lenient=False, base=base)}
    facts = tmp / "facts.json"
    db = profile([sys.executable, "nested_batches.py", "--rounds", str(ROUNDS), "--out", facts], tmp / "nest",
                 "2023.4", env, PROGRAMS)
    return db, json.loads(facts.read_text())


@pytest.mark.nsys("2023.4")
def test_nested_batch_ranges_count_once(nested):
    path, facts = nested
    assert facts["wrapped"]                                    # the injected range is there too
    sizes = facts["sizes"]
    recorded = sql(path, """SELECT e.eventType, count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                            WHERE COALESCE(e.text, s.value) LIKE 'pooler n=%' GROUP BY 1 ORDER BY 1""")
    # per round: direct run 2 push/pop ranges (injected + annotated), serve 3, handle 2 start/end,
    # the two concurrent tasks 2 start/end
    assert recorded == [(59, 5 * ROUNDS), (60, 4 * ROUNDS)]
    analysis = analyze(str(path))
    r = analysis.result
    assert r.batches == len(sizes) == 5 * ROUNDS
    assert r.requests == sum(sizes)
    assert r.excluded.nested_batch_ranges == sum(n for _, n in recorded) - len(sizes) == 4 * ROUNDS
    assert [w for w in r.warnings if "inside another batch range" in w] == [
        f"{4 * ROUNDS} 'pooler' batch ranges lie inside another batch range of their thread (an annotation and an "
        "injected spec on one function, or a batch target calling another): each batch counted once, as its "
        "outermost range"]
    # the stages of each Pooler.run (direct and under serve) go to the outermost batch: 5 each
    inst = analysis.stages.instances
    for st in STAGES:
        assert r.stages[st].instances == 2 * ROUNDS and r.stages[st].outside_batch_instances == 0
    held = sorted(np.bincount(inst["batch"], minlength=r.batches).tolist())
    assert held == [0] * (3 * ROUNDS) + [5] * (2 * ROUNDS)
    # the outermost range is the one kept: each batch's span holds its nested ranges'
    spans = sql(path, """SELECT e.start, e."end", e.eventType FROM NVTX_EVENTS e LEFT JOIN StringIds s
                         ON s.id = e.textId WHERE COALESCE(e.text, s.value) LIKE 'pooler n=%'""")
    b = analysis.stages.batches
    kept = set(zip(b["start"].tolist(), b["end"].tolist()))
    for s, e, _ in spans:
        if (s, e) not in kept:
            assert any(ks <= s and e <= ke for ks, ke in kept), (s, e)


@pytest.mark.nsys("2023.4")
def test_strict_fails_on_nested_batches(nested):
    path, _ = nested
    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", str(path), "-f", "json", "--strict"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=120)
    assert p.returncode == 2
    out = json.loads(p.stdout)
    assert out["excluded"]["nested_batch_ranges"] == 4 * ROUNDS
    assert any("inside another batch range" in w for w in out["warnings"])
    assert len([ln for ln in p.stderr.splitlines() if "--strict" in ln]) == 1
