"""A real series: the demo server recorded 10 times as main, then 10 times as a PR, with the
project's nsys on this CPU, each stored by `analyze --store` (commit and branch from
$CLEF_PROF_COMMIT and $CLEF_PROF_BRANCH), then read by `clef-prof history`.

The PR adds a wait to one stage: `head` sleeps 0.5 ms per request (`demo-server --delay-ms 0.5`);
parse, index, transfer and encode run the same code in both. A wait, not more Python work: on a
loaded 2-core machine the CPU time of a stage swings by 2-3x between captures (a 1.7x change of
transfer, the CPU path's difference between the variants, was not apart under a load average of
10), while a sleep is at least its length under any load. The oracle does not come from clef-prof:
each capture's head ns per request summed by SQL from its NVTX ranges, and the two commits' 10
figures completely apart (a rank-sum U of 0: two-sided p = 2 / C(20, 10) = 1.1e-5).

The two are recorded in pairs at once (main i beside PR i), so that the load of this shared
2-core machine falls on both alike: a stage that did not change then has exchangeable figures, and
at the level the test asks (1e-4 a series) one of the four shows a change by chance in at most
4 runs in 10,000. They are stored in commit order, the 10 main results first.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from clef_prof.record import procs
from clicheck import run_main
from conftest import sql
from httpcheck import free_port

ROOT = Path(__file__).resolve().parents[2]
UNCHANGED = ("parse", "index", "transfer", "encode")
CHANGED = "head"
PR_DELAY_MS = 0.5


def record_pair(out: Path, i: int, token: str) -> dict[str, Path]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env[procs.ENV_MARK] = token
    env.pop("CLEF_PROF_NSYS", None)
    started = {}
    for variant in ("main", "pr"):
        port, folder = free_port(), out / f"{variant}-{i}"
        cmd = [sys.executable, "-m", "clef_prof", "record", "--out", folder, "--url", f"http://127.0.0.1:{port}",
               "--warmup", "0.5", "--duration", "1", "-q", "--", sys.executable, "-m", "clef_prof", "demo-server",
               "--port", str(port), "--variant", "main", *(["--delay-ms", str(PR_DELAY_MS)] if variant == "pr" else [])]
        started[variant] = (folder, subprocess.Popen(list(map(str, cmd)), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                     stderr=subprocess.PIPE, text=True))
    for variant, (folder, p) in started.items():
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    return {v: f for v, (f, _) in started.items()}


def head_ns_per_request(export: Path) -> float:
    """The oracle: Σ head range ns / Σ K of the 'pooler n=K' ranges, by SQL over NVTX_EVENTS."""
    text = "coalesce(e.text, (SELECT value FROM StringIds s WHERE s.id = e.textId))"
    (ns,), = sql(export, f'SELECT sum(e."end" - e.start) FROM NVTX_EVENTS e WHERE e.eventType = 59 '
                         f"AND e.\"end\" IS NOT NULL AND {text} = 'head'")
    sizes = sql(export, f"SELECT {text} FROM NVTX_EVENTS e WHERE e.eventType = 59 AND e.\"end\" IS NOT NULL "
                        f"AND {text} LIKE 'pooler n=%'")
    return ns / sum(int(t.split()[1][2:]) for (t,) in sizes)


@pytest.mark.nsys("2023.4")
def test_ten_main_then_ten_pr_the_change_point_is_at_the_switch(tmp_path, monkeypatch):
    token = uuid.uuid4().hex
    try:
        pairs = [record_pair(tmp_path, i, token) for i in range(1, 11)]
    finally:
        procs.wait_gone(lambda: not procs.marked(token), 10)
        left = procs.terminate_marked(token)
    assert not left, procs.describe(left)
    db = tmp_path / "history.db"
    for variant in ("main", "pr"):
        monkeypatch.setenv("CLEF_PROF_COMMIT", variant)
        monkeypatch.setenv("CLEF_PROF_BRANCH", "trunk")
        for pair in pairs:
            p = run_main("analyze", pair[variant], "-f", "json", "-o", tmp_path / f"{variant}.json", "--store", db)
            assert p.returncode == 0 and "stored 1 result(s)" in p.stderr, p.stderr
    # the oracle: head apart, completely, by at least most of the wait
    exports = {v: [json.loads((pr[v] / "manifest.json").read_text())["export"] for pr in pairs] for v in ("main", "pr")}
    oracle = {v: [head_ns_per_request(pair[v] / e) for pair, e in zip(pairs, exports[v])] for v in exports}
    assert max(oracle["main"]) < min(oracle["pr"]), oracle
    assert min(oracle["pr"]) > 0.9 * PR_DELAY_MS * 1e6, oracle

    p = run_main("history", db, "-f", "json", "--metric", "stages.*.host_ms_per_request", "--sig-level", "0.0001")
    assert p.returncode == 0, p.stderr
    series = {s["metric"].split(".")[1]: s for s in json.loads(p.stdout)["series"]}
    assert sorted(series) == sorted([*UNCHANGED, CHANGED])
    t = series[CHANGED]
    assert [pt["commit"] for pt in t["points"]] == ["main"] * 10 + ["pr"] * 10
    # the stored figure is the capture's: within 5% of the oracle's SQL sum (analyze leaves out ranges cut at edges)
    for pt, ns in zip(t["points"], oracle["main"] + oracle["pr"]):
        assert pt["value"] == pytest.approx(ns / 1e6, rel=0.05)
    (c,) = t["changes"]
    assert (c["index"], c["commit_range"], c["direction"], c["regression"]) == (10, "main..pr", "up", True)
    assert c["change_pct"] > 20 and c["ci_pct"][0] > 0
    for stage in UNCHANGED:
        assert series[stage]["changes"] == [], (stage, series[stage]["changes"])
    # at the default level too, the switch is found where it is
    doc = json.loads(run_main("history", db, "-f", "json", "--metric", f"stages.{CHANGED}.host_ms_per_request").stdout)
    assert [c["index"] for c in doc["series"][0]["changes"]] == [10]
    # the gate: the newest results (commit pr) start the change in head, in no other stage
    p = run_main("history", db, "--sig-level", "0.0001", "--fail-if-new-change", "stages.*.host_ms_per_request")
    assert p.returncode == 1, p.stderr
    fired = [ln for ln in p.stderr.splitlines() if ": fired:" in ln]
    assert len(fired) == 1 and f"stages.{CHANGED}.host_ms_per_request" in fired[0] and "main..pr" in fired[0], p.stderr
    assert "5 noisy series judged at 0.01% each: family-wise false-alarm rate at most 0.05%" in p.stderr
