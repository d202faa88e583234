"""Engine-renamed ids joined by a spec's `engine_id_pattern`: an unannotated program that renames
ids as vLLM does (tests/programs/engine_ids_app: handler id `<id>`, enqueue `embd-<id>-<n>`, batch
rows `embd-<id>-<n>-<8 hex>`), given request ranges, enqueue marks and batch ranges by
`clef-prof inject` with the shipped pattern, recorded with nsys 2023.4; every journey checked
against the SQL oracle, which applies the pattern on its own."""
from __future__ import annotations

import os
import re
import sqlite3
import sys
from dataclasses import replace

import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.annotate import spec as sp
from conftest import ROOT
from journey_oracle import check, compute
from recording import profile

PROGRAMS = ROOT / "tests" / "programs"
SPEC = PROGRAMS / "engine_ids.toml"
N = 40          # requests: i even has 2 prompts; i % 3 == 0 sends X-Request-Id hdr-i; the last is a score request


def _ids(db, like: str) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        texts = [r[0] for r in con.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE ?", (like,))]
    finally:
        con.close()
    return [i for t in texts for i in re.search(r"rid=([^\s;)]+)", t).group(1).split(",")]


def test_the_program_spec_carries_the_shipped_vllm_request_table():
    mine, shipped = sp.load(str(SPEC)).request, sp.load(str(ROOT / "annotations" / "clef-vllm.toml")).request
    assert mine.engine_id_pattern == shipped.engine_id_pattern
    assert (mine.id_header, mine.header_arg, mine.id_arg, mine.enqueue_id_arg) == (
        shipped.id_header, shipped.header_arg, shipped.id_arg, shipped.enqueue_id_arg)


@pytest.mark.nsys("2023.4")
def test_engine_renamed_ids_meet_their_requests_under_nsys(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{PROGRAMS}"
    argv = [sys.executable, "-m", "clef_prof", "inject", "--spec", str(SPEC), "--",
            sys.executable, "-m", "engine_ids_app.server", str(N)]
    db = profile(argv, tmp_path / "cap", "2023.4", env, PROGRAMS)
    cfg = sp.load(str(SPEC)).config
    a = analyze(str(db), cfg)
    oracle = compute(db, engine_id_pattern=cfg.engine_id_pattern)
    check(a, oracle)

    # from the export's own rows: the ids on each side
    handler_ids = _ids(db, "request rid=%")
    marks = _ids(db, "enqueued rid=%")
    rows = _ids(db, "pooler%rid=%")
    assert len(handler_ids) == N
    assert sorted(i for i in handler_ids if i.startswith("hdr-")) == sorted(f"hdr-{i}" for i in range(0, N, 3))
    assert sum(bool(re.fullmatch(r"[0-9a-f]{16}", i)) for i in handler_ids) == N - len(range(0, N, 3))
    embd_rows = [r for r in rows if r.startswith("embd-")]
    prompts = sum(2 if i % 2 == 0 else 1 for i in range(N - 1))
    assert len(embd_rows) == len([m for m in marks if m.startswith("embd-")]) == prompts
    assert all(re.fullmatch(r"embd-.+-[01]-[0-9a-f]{8}", r) for r in embd_rows)
    score_rows = [r for r in rows if r.startswith("score-")]
    assert len(score_rows) == 1 and len(rows) == prompts + 1
    assert re.fullmatch(rf"score-hdr-{N - 1}-query-0-[0-9a-f]{{8}}", score_rows[0])

    # the score request (a forwarding `__call__(*args, **kwargs)`) got its header id and meets its row
    j = a.result.journey
    assert not [w for w in a.result.warnings if "matched none" in w]
    assert j.request_ranges == N and j.complete == N and j.cut_by_window == 0
    assert j.without_batch == 0 and j.unclaimed_batch_ids == 0
    assert j.without_enqueue == 0 and j.renamed_batch_ids == j.batch_ids == prompts + 1
    t = a.journeys
    done = t["batch"] >= 0
    assert int(t["batch_rows"][done].sum()) == prompts + 1
    assert sorted(t["batch_rows"][done].tolist()) == sorted([2 if i % 2 == 0 else 1 for i in range(N - 1)] + [
        2 if (N - 1) % 2 == 0 else 1])
    # the segments close, and some 2-prompt request spanned two steps (its batch is the later one)
    assert (t["e2e_ns"] == sum(t[f"{s}_ns"] for s in ("receive", "queue", "batch", "after_batch", "encode",
                                                      "send", "unattributed"))).all()
    assert any(v["batches"] == 2 for v in oracle.requests.values())

    # without the pattern, nothing meets: every row unclaimed, every request without a batch
    b = analyze(str(db), replace(cfg, engine_id_pattern=None)).result.journey
    assert b.complete == 0 and b.without_batch == N and b.unclaimed_batch_ids == prompts + 1
    # a pattern that matches no batch id says so
    w = analyze(str(db), replace(cfg, engine_id_pattern="^nothing-(.+)$")).result.warnings
    assert [x for x in w if f"matched none of the {prompts + 1} batch ids" in x]


@pytest.mark.nsys("2023.4")
def test_a_pattern_that_matches_no_batch_id_is_said(tmp_path):
    """The same recording read with a pattern that fits none of its batch ids: one warning, and
    requests meet only the batch ids equal to theirs (none here)."""
    import dataclasses
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{PROGRAMS}"
    argv = [sys.executable, "-m", "clef_prof", "inject", "--spec", str(SPEC), "--",
            sys.executable, "-m", "engine_ids_app.server", "12"]
    db = profile(argv, tmp_path / "cap", "2023.4", env, PROGRAMS)
    cfg = dataclasses.replace(sp.load(str(SPEC)).config, engine_id_pattern="^nomatch-(.+)$")
    r = analyze(str(db), cfg).result
    said = [w for w in r.warnings if "matched none" in w]
    assert len(said) == 1 and f"none of the {r.journey.batch_ids:,} batch ids" in said[0]
    assert r.journey.renamed_batch_ids == 0 and r.journey.complete == 0
