"""`clef-prof bench` on real demo servers (CPU path, real HTTP): order, statistics, failures, parity.

Speed design: the arms run the demo server with --delay-ms, a sleep in its serial batcher per
request (4 ms vs 5 ms), so each server's throughput is capped at 250 vs 200 req/s whatever the
machine's load: the slow arm is 20% slower by construction, and the test asserts < -8%.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clef_prof.bench import load as bl
from clef_prof.bench import stats as bs
from clef_prof.record import procs
from httpcheck import free_port

ROOT = Path(__file__).resolve().parents[2]
MARK = "CLEF_TEST_MARK"


def demo(port: int, *args) -> str:
    return shlex.join([sys.executable, "-m", "clef_prof", "demo-server", "--device", "cpu", "--quiet",
                       "--port", str(port), *map(str, args)])


def bench(*args, mark: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env[MARK] = mark
    return subprocess.run([sys.executable, "-m", "clef_prof", "bench", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_nothing_left(mark: str) -> None:
    for _ in range(50):
        left = procs.marked(mark, name=MARK)
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes left behind: {procs.describe(left)}")


FAST = ["--warmup", "0.5", "--windows", "2", "--window-s", "1", "--quiet"]


@pytest.fixture(scope="module")
def ab(tmp_path_factory):
    """main (4 ms a request) vs slow (5 ms), 2 rounds, a closed-loop and an open-loop case, parity."""
    tmp = tmp_path_factory.mktemp("bench")
    port, mark = free_port(), uuid.uuid4().hex
    cases = tmp / "cases.json"
    cases.write_text(json.dumps([{"concurrency": 8, "words": 50}, {"concurrency": 8, "words": 200, "rate": 100}]))
    p = bench("--arm", f"main={demo(port, '--variant', 'main', '--delay-ms', 4)}",
              "--arm", f"slow={demo(port, '--variant', 'main', '--delay-ms', 5)}",
              "--url", f"http://127.0.0.1:{port}", "--rounds", 2, "--cases", cases, *FAST, "--parity", 8,
              "--check-response", "clef_prof.bench.load:demo_words", "--fail-if", "throughput_rps < -2%",
              "--fail-if", "latency_ms_p99 < -50%", "--format", "json", "-o", tmp / "bench.json", "--out", tmp / "run",
              mark=mark)
    assert_nothing_left(mark)
    return p, json.loads((tmp / "bench.json").read_text()), tmp


def test_order_abba_and_case_reversal(ab):
    p, r, tmp = ab
    assert [(s["arm"], s["round"]) for s in r["servers"]] == [("main", 1), ("slow", 1), ("slow", 2), ("main", 2)]
    assert [s["case_order"] for s in r["servers"]] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    # the windows ran in that order: per server, its cases in its case order, 2 windows each
    windows = sorted((w for c in r["cases"] for a in c["arms"].values() for w in a["windows"]), key=lambda w: w["seq"])
    assert [w["seq"] for w in windows] == list(range(1, 17))
    for s in r["servers"]:
        ran = [(w["case"], w["window"]) for w in windows if w["server_seq"] == s["seq"]]
        assert ran == [(c, n) for c in s["case_order"] for n in (1, 2)]
    assert json.loads((tmp / "run" / "bench.json").read_text())["servers"] == r["servers"]
    assert sorted(f.name for f in (tmp / "run").glob("*.stderr.log")) == ["01-main-r1.stderr.log",
                                                                         "02-slow-r1.stderr.log",
                                                                         "03-slow-r2.stderr.log",
                                                                         "04-main-r2.stderr.log"]


def test_slower_server_detected_and_gated(ab):
    p, r, _ = ab
    closed = r["cases"][0]
    t = next(c for c in closed["changes"] if c["metric"] == "throughput_rps")
    assert t["verdict"] == "beyond noise" and t["ci"][1] < 0 and t["change_pct"] < -8, t
    assert t["ci"][0] <= t["change_pct"] <= t["ci"][1]
    for a in closed["arms"].values():
        assert a["servers"] == 2 and a["window_count"] == 4 and a["errors"]["count"] == 0
        lo, hi = a["window_range_rps"]
        assert lo <= a["throughput_rps"] <= hi
    fired = [g for g in r["gates"] if g["fired"]]
    assert [(g["gate"], g["case"]) for g in fired] == [("throughput_rps < -2%", closed["label"])]
    assert p.returncode == 1 and "gate fired: throughput_rps < -2%" in p.stderr and "Traceback" not in p.stderr


def test_open_loop_same_schedule_for_every_server(ab):
    _, r, _ = ab
    opened = r["cases"][1]
    assert opened["case"]["rate"] == 100
    offered = {}
    for a in opened["arms"].values():
        for w in a["windows"]:
            offered.setdefault(w["window"], set()).add(w["offered"])
            # 100/s for 1 s is well under both servers' 200-250 req/s: every arrival is answered
            assert w["completions"] == w["offered"] and w["errors"] == 0
            assert w["throughput_rps"] == pytest.approx(w["offered"] / w["elapsed_s"], rel=1e-3)   # elapsed_s is rounded
    assert all(len(v) == 1 for v in offered.values()), offered       # seeded by case and window, not by server


def test_self_comparison_holds_zero(ab):
    """The same windows as two arms: every interval holds 0 (seeded, so exactly reproducible)."""
    _, r, _ = ab
    for ci, case in enumerate(r["cases"]):
        ws = case["arms"]["main"]["windows"]
        ch = bs.changes({"a": ws, "b": [dict(w) for w in ws]}, "a", 2000, 0, ci, 0.95)
        assert {c["metric"] for c in ch} == set(bs.METRICS)
        for c in ch:
            assert c["change"] == 0 and c["ci"][0] <= 0 <= c["ci"][1] and c["verdict"] == "within noise", c
        assert ch == bs.changes({"a": ws, "b": ws}, "a", 2000, 0, ci, 0.95)


def test_parity_and_markdown(ab):
    _, r, tmp = ab
    assert r["parity"]["mismatches"] == []
    assert {n: (a["matched"], a["bodies"]) for n, a in r["parity"]["arms"].items()} == {"main": (8, 8),
                                                                                       "slow": (8, 8)}
    md = bs.render_markdown(r)
    assert "| C | words / questions | req/s main → slow | change | 95% CI | p50 ms | p99 ms | peak device MiB |" in md
    assert "outputs matched (slow vs main server 1): 8 of 8 on 2 servers, exactly" in md
    assert "beyond noise" in md and "8 @ 100/s" in md


def test_bad_answers_counted_by_kind_and_parity_mismatch(tmp_path):
    """Bodies the server refuses (400) or answers without q0 (check fails); an arm with other scores."""
    port, mark = free_port(), uuid.uuid4().hex
    good = {"state": "the patient reports mild pain", "questions": {"q0": {"type": "boolean"}}}
    other = {"state": "stable vitals", "questions": {"x": {"type": "score"}}}
    body = tmp_path / "bodies.jsonl"
    body.write_text("\n".join(json.dumps(b) for b in (good, {"state": "no questions", "questions": {}}, other, good)))
    p = bench("--arm", f"main={demo(port, '--variant', 'main')}",
              "--arm", f"off={demo(port, '--variant', 'pr', '--score-offset', 0.001)}",
              "--url", f"http://127.0.0.1:{port}", "--rounds", 1, "--preset", "raw", "--body", body,
              "--path", "/v1/systemone", "--concurrency", 4, "--warmup", "0.3", "--windows", 1, "--window-s", "0.5",
              "--quiet", "--parity", 4, "--check-response", "answers.q0.score", "-f", "json", "-o", tmp_path / "r.json",
              mark=mark)
    assert_nothing_left(mark)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    for a in r["cases"][0]["arms"].values():
        kinds = a["errors"]["kinds"]
        assert set(kinds) == {"HTTP 400", "check: answers.q0.score missing"}, kinds
        # the bodies are cycled, so each kind is about a quarter of the requests: both well above none
        assert a["errors"]["count"] == sum(kinds.values()) and min(kinds.values()) >= 2
        assert a["completions"] > 0
    assert "requests failed (HTTP 400: " in p.stderr
    par = r["parity"]
    assert par["arms"]["off"] == {"bodies": 4, "matched": 1, "servers": 1}          # the 400 body matches
    assert {m["body_index"] for m in par["mismatches"]} == {0, 2, 3}
    assert all(m["difference"].startswith("$.answers.") and m["body"] for m in par["mismatches"])
    assert "parity: 3 answers differ from main server 1" in p.stderr


def test_server_dies_mid_window(tmp_path):
    port, mark = free_port(), uuid.uuid4().hex
    p = bench("--arm", f"dying={demo(port, '--variant', 'main', '--delay-ms', 2, '--die-after-requests', 60)}",
              "--arm", f"main={demo(port, '--variant', 'main')}", "--url", f"http://127.0.0.1:{port}",
              "--rounds", 1, "--concurrency", 4, "--warmup", 0, "--windows", 3, "--window-s", 1, "--quiet",
              "--out", tmp_path / "run", mark=mark)
    assert_nothing_left(mark)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("clef-prof: error: 01-dying-r1: the server exited during window ")
    assert "killed by SIGKILL" in lines[0]
    run = json.loads((tmp_path / "run" / "bench.json").read_text())
    assert run["status"] == "failed" and [s["arm"] for s in run["servers"]] == ["dying"]


@pytest.mark.parametrize("args, needle", [
    (["--arm", "a=x"], "give at least two arms"),
    (["--arm", "a=x", "--arm", "b=y", "--concurrency", "0"], "--concurrency '0': every value must be at least 1"),
    (["--arm", "a=x", "--arm", "b=y", "--fail-if", "rps < 1"], "unknown metric 'rps'"),
    (["--arm", "a=x", "--arm", "b=y", "--preset", "raw"], "--preset raw needs --body FILE"),
    (["--arm", "a=x", "--arm", "b=y", "--cases", "/nonexistent.json"], "--cases /nonexistent.json"),
    (["--arm", "a=x", "--arm", "b=y", "--check-response", "nomod:f"], "cannot load f from nomod"),
    (["--arm", "a=/nonexistent/server", "--arm", "b=y", "--url", "http://127.0.0.1:9"], "cannot start"),
    # refused before any server starts (a port out of range was an internal error once the first was up)
    (["--arm", "a=/nonexistent/server", "--arm", "b=y", "--url", "http://127.0.0.1:99999"],
     "--url: expected an http:// or https:// URL with a host"),
    (["--arm", "a=/nonexistent/server", "--arm", "b=y", "--url", "http://[::1"], "--url: expected an http://"),
    (["--arm", "a=/nonexistent/server", "--arm", "b=y", "--health-url", "ftp://h/health"],
     "--health-url: expected an http://"),
    # NaN passed the check and meant no timeout at all; an infinite window was an internal error
    (["--arm", "a=x", "--arm", "b=y", "--request-timeout", "nan"], "--request-timeout must be positive"),
    (["--arm", "a=x", "--arm", "b=y", "--window-s", "inf"], "--window-s and --request-timeout must be positive"),
])
def test_bad_input_one_line(args, needle):
    mark = uuid.uuid4().hex
    p = bench(*args, mark=mark, timeout=60)
    assert_nothing_left(mark)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("bench: ")]
    assert p.returncode == 1 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("clef-prof: error: ") and needle in lines[0], lines[0]


def test_checks_and_differences():
    check = bl.make_check("$.data[0].embedding")
    assert check(b'{"data": [{"embedding": [1]}]}', b"{}") is None
    assert check(b'{"data": []}', b"{}") == "check: $.data[0].embedding missing"
    assert bl.first_difference({"a": [1.0, 2.0]}, {"a": [1.0, 2.0005]}, 1e-3) is None
    assert bl.first_difference({"a": [1.0, 2.0]}, {"a": [1.0, 2.0005]}, 0) == "$.a[1]: 2.0 != 2.0005"
    assert bl.first_difference({"a": 1}, {"b": 1}, 0) == "$: keys ['a'] != ['b']"
