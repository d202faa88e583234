"""`clef-prof whatif` end to end on the ground-truth server tests/programs/whatif_truth.py (real
HTTP, real processes, real delays): the slopes its construction gives, and the bad input.

The server's batch loop is never idle (8 clients, batches of at most 4), so a stage on its critical
path costs its added time one for one: throughput(x) = 1 / (1/R0 + x) at +x ms per request (x as
the servers measured it), whose least-squares slope over the observed x is the constructed answer;
a stage that runs on another thread during the simulated device wait costs nothing until it is
longer than that wait (then only what goes past it). Each test asserts the constructed slope lies
in the tool's interval and that a wrong one (twice it, 0, or the critical-path slope for a hidden
stage) does not.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from clef_prof.base.errors import EXIT_INPUT
from clef_prof.record import procs
from clef_prof.whatif import store
from clef_prof.whatif.run import analysis
from httpcheck import free_port

ROOT = Path(__file__).resolve().parents[2]
TRUTH = ROOT / "tests" / "programs" / "whatif_truth.py"
MARK = "CLEF_TEST_MARK"
FAST = ["--warmup", "0.5", "--windows", "2", "--window-s", "1", "-c", "8", "-q"]
# the ground-truth server: prep 3 ms a request on the batch loop, side 1 ms on a helper thread
# during a 10 ms device wait; its stages wait rather than spin and the levels sleep: on this loaded
# 2-core machine a spin's wall time and the servers' throughput vary with what else runs (±10%
# between servers), a wait's hardly (±1%), so the intervals are narrow enough to tell the
# constructed slope from twice it. CONFIDENCE 0.999: a correct answer falls outside once in 1000.
TRUTH_ARGS = ["--wait", "--prep-ms", "3", "--side-ms", "1", "--device-ms", "10"]
CONFIDENCE = 0.999


def whatif(*args, mark: str, server: list | None = None, port: int | None = None, timeout: float = 240,
           popen: bool = False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env[MARK] = mark
    argv = [sys.executable, "-m", "clef_prof", "whatif", *map(str, args)]
    if server is not None:
        argv += ["--url", f"http://127.0.0.1:{port}", "--", sys.executable, str(TRUTH), "--port", str(port),
                 *map(str, server)]
    if popen:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def assert_nothing_left(mark: str) -> None:
    for _ in range(50):
        left = procs.marked(mark, name=MARK)
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes left behind: {procs.describe(left)}")


def experiment(tmp_path, stage: str, levels: str, servers: int = 3):
    port, mark = free_port(), uuid.uuid4().hex
    save = tmp_path / "whatif.json"
    server = TRUTH_ARGS
    p = whatif("--stages", stage, "--levels", levels, "--servers", servers, "--mode", "sleep", "--confidence",
               CONFIDENCE, *FAST, "--save", save, "-f", "json",
               mark=mark, server=server, port=port)
    assert_nothing_left(mark)
    assert p.returncode == 0, p.stderr
    obs, meta = store.load(save)
    return obs, meta, json.loads(p.stdout)


def throughput(obs):
    x = np.array([o.added_ms_per_request for o in obs])
    y = np.array([o.metrics["throughput_rps"] for o in obs])
    return x, y, float(y[x == 0].mean())


def critical_slope(x, r0, slack_ms=0.0):
    """%/ms: the least-squares slope over x of a critical path that grows by max(0, x - slack)."""
    model = 1 / (1 / r0 + np.maximum(0.0, x - slack_ms) / 1000)
    return 100 * np.polyfit(x, model, 1)[0] / r0


def linear_part(obs, sl: dict):
    """The servers the tool fitted its slope on: the levels whose mean added time lies within its
    linear range (all when it bends nowhere)."""
    top = sl.get("linear_max_ms")
    mean = {k: np.mean([o.added_ms_per_request for o in obs if (o.stage, o.level) == k])
            for k in {(o.stage, o.level) for o in obs}}
    return [o for o in obs if top is None or mean[(o.stage, o.level)] <= top * (1 + 1e-9)]


def slope(result: dict, stage: str, metric: str = "throughput_rps") -> dict:
    st = next(s for s in result["stages"] if s["stage"] == stage)
    return next(s for s in st["slopes"] if s["metric"] == metric)


def inside(sl, v) -> bool:
    return sl["pct_lo"] <= v <= sl["pct_hi"]


def test_critical_stage_costs_its_share_of_the_cycle(tmp_path):
    obs, meta, result = experiment(tmp_path, "prep", "0,100%,200%")
    assert len(obs) == 9 and not any(o.failed for o in obs)
    assert [o.stage for o in obs[:3]] == [None, "prep", "prep"]            # round 1 in arm order, then ABBA
    assert [o.stage for o in obs[3:6]] == ["prep", "prep", None]
    sl = slope(result, "prep")
    x, y, r0 = throughput(linear_part(obs, sl))     # 1/(1/R0 + x) curves: the constructed slope over the same range
    want = critical_slope(x, r0)
    print(f"prep: measured {sl['pct_per_ms']:+.2f} %/ms [{sl['pct_lo']:+.2f}, {sl['pct_hi']:+.2f}], "
          f"constructed {want:+.2f}; per +1% of its time {sl['pct_per_pct']:+.3f}")
    assert sl["verdict"] == "critical"
    assert inside(sl, want) and not inside(sl, 2 * want) and not inside(sl, 0.0)
    # per +1% of the stage's own time: about minus its share of the cycle (own ms / cycle ms per
    # request), by construction 3 / (3 + 10) = 0.23 less the HTTP and batching overheads
    own = np.mean([o.stage_ms_per_request for o in obs if o.stage == "prep"])     # as the tool: on its delayed servers
    share = own * r0 / 1000
    assert sl["pct_per_pct"] == pytest.approx(sl["pct_per_ms"] * own / 100)
    assert 0.15 < share < 0.3 and -1.2 * share < sl["pct_per_pct"] < -0.6 * share
    # the added time per request is at least what was asked, 100% and 200% of the stage's own time
    # (a sleep's wall time: more when the machine is slow to wake the thread)
    for o in obs:
        if o.stage:
            assert o.level * 0.9 <= o.added_ms_per_request / o.stage_ms_per_request <= o.level * 3
            assert o.calls_per_request == pytest.approx(0.25, rel=0.35)      # batches of up to 4


def test_stage_hidden_by_the_device_wait(tmp_path):
    obs, meta, result = experiment(tmp_path, "side", "0,200%,400%")
    sl = slope(result, "side")
    x, y, r0 = throughput(linear_part(obs, sl))
    wrong = critical_slope(x, r0)           # what it would cost on the critical path
    print(f"side: measured {sl['pct_per_ms']:+.2f} %/ms [{sl['pct_lo']:+.2f}, {sl['pct_hi']:+.2f}], "
          f"constructed 0, on the critical path it would be {wrong:+.2f}")
    assert sl["verdict"] == "hidden" and sl["hidden"]
    assert inside(sl, 0.0) and not inside(sl, wrong)
    assert x.max() > 2.0        # the design did add time: up to 4x the stage's 1 ms a request


def test_stage_critical_past_its_slack_bends(tmp_path):
    """side 1 ms a request, device 10 ms: +400% stays hidden, +1100% goes about 3 ms past the wait."""
    obs, meta, result = experiment(tmp_path, "side", "0,400%,1100%", servers=5)   # per-level spreads: 3 a level leave Satterthwaite few df
    low = [o for o in obs if o.stage is None or o.level < 10]
    high = [o for o in obs if o.stage is None or o.level > 10]
    lo = analysis(low, CONFIDENCE).stages[0].slopes[0]
    hi = analysis(high, CONFIDENCE).stages[0].slopes[0]
    x, y, r0 = throughput(high)
    # the slack: the device wait less the stage's own time, per request (from the baseline servers)
    side = np.mean([o.per_stage["side"]["own_ms_per_request"] for o in obs if o.stage is None])
    want = critical_slope(x, r0, slack_ms=10.0 - side)
    unbent = critical_slope(x, r0)
    xl, _, r0l = throughput(low)
    print(f"side up to +400%: {lo.pct_per_ms:+.2f} %/ms [{lo.pct_lo:+.2f}, {lo.pct_hi:+.2f}]; to +1100%: "
          f"{hi.pct_per_ms:+.2f} [{hi.pct_lo:+.2f}, {hi.pct_hi:+.2f}], constructed {want:+.2f}, "
          f"without the bend {unbent:+.2f}")
    assert lo.verdict == "hidden" and not lo.pct_lo <= critical_slope(xl, r0l) <= lo.pct_hi
    assert hi.verdict == "critical" and hi.pct_lo <= want <= hi.pct_hi
    assert not hi.pct_lo <= unbent <= hi.pct_hi and not hi.pct_lo <= 2 * want <= hi.pct_hi
    # the tool itself says where it bends: past the +400% servers, the slope kept to the range below
    whole = slope(result, "side")
    top = np.mean([o.added_ms_per_request for o in obs if o.stage == "side" and o.level < 10])   # that level's mean
    assert whole["linear"] is False and whole["bend"] and whole["linear_max_ms"] == pytest.approx(top)
    assert whole["verdict"] == "hidden"


def test_unknown_stage_named(tmp_path):
    port, mark = free_port(), uuid.uuid4().hex
    p = whatif("--stages", "prep,nosuch", "--levels", "0,10%,20%", "--servers", 2, *FAST, mark=mark,
               server=[], port=port)
    assert_nothing_left(mark)
    assert p.returncode == EXIT_INPUT and p.stdout == ""
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "nosuch" in err[0] and "prep" in err[0] and "baseline server 01" in err[0], err


def test_delay_longer_than_the_window_refused_before_any_server(tmp_path):
    p = whatif("--stages", "prep", "--levels", "0,500ms,2000ms", "--window-s", "1", "--", sys.executable, TRUTH,
               "--port", free_port(), mark=uuid.uuid4().hex)
    assert p.returncode == EXIT_INPUT and len(p.stderr.strip().splitlines()) == 1
    assert "2000ms per call is longer than the --window-s 1 s" in p.stderr


def test_delay_the_window_cannot_hold_refused_after_the_baseline(tmp_path):
    port, mark = free_port(), uuid.uuid4().hex
    p = whatif("--stages", "prep", "--levels", "0,20ms,400ms", "--servers", 2, *FAST, mark=mark, server=[], port=port)
    assert_nothing_left(mark)
    assert p.returncode == EXIT_INPUT and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "prep +400ms adds" in p.stderr and "window would hold" in p.stderr and "fewer than 20" in p.stderr


def test_server_dying_at_one_level_named_others_kept(tmp_path):
    port, mark = free_port(), uuid.uuid4().hex
    save = tmp_path / "w.json"
    p = whatif("--stages", "prep", "--levels", "0,25%,50%", "--servers", 2, *FAST, "--save", save, mark=mark,
               server=["--die-when-delayed", "prep=spin:0.5x"], port=port)
    assert_nothing_left(mark)
    assert p.returncode == 1
    err = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(err) == 2 and all("(prep +50%) failed: " in e and "killed by SIGKILL" in e for e in err), err
    obs, _ = store.load(save)
    assert [o.failed is not None for o in obs] == [o.stage == "prep" and o.level == 0.5 for o in obs]
    assert sum(o.failed is None for o in obs) == 4
    # the other servers' slope: throughput falls as prep's time grows, from the 2 levels left
    assert "prep (" in p.stdout and re.search(r"^throughput +-[0-9.]+ +\[-", p.stdout, re.M), p.stdout


def test_ctrl_c_stops_every_server(tmp_path):
    port, mark = free_port(), uuid.uuid4().hex
    proc = whatif("--stages", "prep", "--levels", "0,25%,50%", "--servers", 2, "--warmup", "0.5", "--windows", 2,
                  "--window-s", 1, "-c", 8, mark=mark, server=[], port=port, popen=True)
    seen = []
    for line in proc.stderr:        # wait until the second server is serving, then Ctrl-C
        seen.append(line)
        if "02-prep+25%-r1: warmed up" in line:
            break
    assert procs.marked(mark, name=MARK), "no server running when the signal was sent"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + err
    assert err.strip().splitlines()[-1] == "clef-prof: interrupted"
    assert "Traceback" not in err
    assert_nothing_left(mark)


@pytest.mark.parametrize("args, needle", [
    (["--stages", "prep", "--levels", "10%,25%"], "give 0 and at least two more"),
    (["--stages", "prep", "--levels", "0,10%,50us"], "in one unit"),
    (["--stages", "prep", "--levels", "0,10,fast"], "'fast' is not a delay"),
    (["--stages", "prep", "-c", "8,16"], "one load"),
    (["--stages", "prep", "--servers", "1"], "--servers must be at least 2"),
    (["--stages", "a,a"], "named twice"),
    (["--levels", "0,1%,2%"], "give --stages"),
    (["--stages", "prep", "--slo-ms", "-1"], "--slo-ms -1"),
    (["--stages", "prep", "--spec", "/nonexistent.toml"], "no such file"),
])
def test_bad_input_one_line(args, needle):
    p = whatif(*args, "--", sys.executable, TRUTH, "--port", free_port(), mark=uuid.uuid4().hex)
    assert p.returncode == EXIT_INPUT and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_from_reanalyses_a_saved_run(tmp_path):
    from clef_prof.whatif.model import Observation

    obs = [Observation(None if i % 3 == 0 else "head", [0.0, 0.1, 0.2][i % 3], "frac", i + 1,
                       [0.0, 0.2, 0.4][i % 3], 2.0, 1.0, 2, {"throughput_rps": 100 - 10 * [0.0, 0.2, 0.4][i % 3] + i % 2},
                       per_stage={"head": {"own_ms_per_request": 2.0, "calls_per_request": 1.0,
                                           "added_ms_per_request": 0.0}})
           for i in range(9)]
    store.save(tmp_path / "w.json", obs, {"stages": ["head"]})
    p = whatif("--from", tmp_path / "w.json", "-f", "json", "--confidence", "0.9", mark=uuid.uuid4().hex)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["confidence"] == 0.9 and r["baseline_servers"] == 3
    sl = slope(r, "head")
    assert sl["per_ms"] == pytest.approx(-10.0, abs=1.5) and sl["verdict"] == "critical"
    refused = whatif("--from", tmp_path / "w.json", "-o", tmp_path / "w.json", mark=uuid.uuid4().hex)
    assert refused.returncode == EXIT_INPUT and "refusing to write over it" in refused.stderr
    (tmp_path / "bad.json").write_text("{}")
    bad = whatif("--from", tmp_path / "bad.json", mark=uuid.uuid4().hex)
    assert bad.returncode == EXIT_INPUT and "not a clef-prof what-if file" in bad.stderr


def test_spec_injected_stage_gets_its_fixed_delay(tmp_path):
    """--spec: the stage `answer` is a plain function wrapped by clef-prof inject; a level in ms
    per call is what each call gets (a spin: at least that, more when the OS runs others)."""
    port, mark = free_port(), uuid.uuid4().hex
    save = tmp_path / "w.json"
    p = whatif("--spec", ROOT / "tests" / "programs" / "whatif_truth.toml", "--stages", "answer", "--levels",
               "0,1ms,2ms", "--servers", 2, *FAST, "--save", save, mark=mark, server=[], port=port)
    assert_nothing_left(mark)
    assert p.returncode == 0, p.stderr
    obs, meta = store.load(save)
    assert meta["command"][:4] == [sys.executable, "-m", "clef_prof", "inject"]
    for o in obs:
        assert o.calls_per_request == pytest.approx(0.25, rel=0.35)       # one call a batch of up to 4
        per_call_ms = o.added_ms_per_request / o.calls_per_request
        assert o.level / 1000 * 0.95 <= per_call_ms <= o.level / 1000 * 1.5 + 0.2, o
