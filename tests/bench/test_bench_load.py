"""`clef-prof bench` under load on real demo servers: goodput under SLOs and saturation per load point.

Design: both arms serve one request at a time (--max-batch 1) with a sleep per request, 2 ms
(main) vs 25 ms (slow): slow cannot answer more than 40 req/s whatever the machine does, so at
60 req/s offered it is saturated (achieved <= 40/60 of the offered rate), and its queue grows by
20 requests a second: the last of the window waits >= 0.5 s, beyond a 200 ms p99 SLO. Every other
figure is checked against its definition, recomputed from the saved windows (timings on a loaded
2-core machine are not asserted).
"""
from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest

from clef_prof.bench import load as bl
from clef_prof.bench import stats as bs
from httpcheck import free_port

from test_bench import assert_nothing_left, bench, demo

SLOS = ["--slo", "p99_ms<=200", "--slo", "latency_ms_mean<=150"]
FAST = ["--warmup", "0.5", "--windows", "1", "--window-s", "1", "--quiet"]


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    port, mark = free_port(), uuid.uuid4().hex
    cases = tmp / "cases.json"
    cases.write_text(json.dumps([{"concurrency": 16, "rate": 10}, {"concurrency": 16, "rate": 60},
                                 {"concurrency": 1}, {"concurrency": 4}]))
    p = bench("--arm", f"main={demo(port, '--delay-ms', 2, '--max-batch', 1)}",
              "--arm", f"slow={demo(port, '--delay-ms', 25, '--max-batch', 1)}",
              "--url", f"http://127.0.0.1:{port}", "--rounds", 3, "--cases", cases, *FAST, *SLOS,
              "--fail-if", "goodput < -2%", "--format", "json", "-o", tmp / "bench.json", "--out", tmp / "run",
              mark=mark)
    assert_nothing_left(mark)
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads((tmp / "bench.json").read_text()), tmp


def case_of(r, **want):
    return next(c for c in r["cases"] if all(c["case"][k] == v for k, v in want.items()))


def test_goodput_is_good_requests_over_elapsed(load):
    _, r, _ = load
    assert r["slo"]["slos"] == [{"text": "latency_ms_p99<=200", "metric": "latency_ms_p99", "max_ms": 200.0},
                                {"text": "latency_ms_mean<=150", "metric": "latency_ms_mean", "max_ms": 150.0}]
    assert r["slo"]["per_request_ms"] == 150.0          # every SLO bounds latency: the tightest counts
    for c in r["cases"]:
        for a in c["arms"].values():
            ws = a["windows"]
            assert all(w["slo_ms"] == 150.0 and 0 <= w["good"] <= w["completions"] for w in ws)
            assert a["good"] == sum(w["good"] for w in ws)
            assert a["goodput_rps"] == pytest.approx(a["good"] / sum(w["elapsed_s"] for w in ws), rel=1e-12)
        (g,) = [ch for ch in c["changes"] if ch["metric"] == "goodput_rps"]
        assert g["servers"] == [3, 3] and g["unit"] == "req/s"
        assert g["baseline_value"] == c["arms"]["main"]["goodput_rps"] and g["value"] == c["arms"]["slow"]["goodput_rps"]


def test_window_goodput_counts_requests_within_the_slo():
    """Records of known latency (scheduled send, answer, error): 5, 100, 150, 150.5 ms and a failed
    request of 1 ms; within 150 ms: 3 (the bound included, the error never)."""
    ms = 1_000_000
    recs = [(0, 5 * ms, None), (0, 100 * ms, None), (10 * ms, 160 * ms, None), (0, int(150.5 * ms), None),
            (0, 1 * ms, "HTTP 500")]
    s = bl.Window(0, 1000 * ms, recs).summary(150.0)
    assert (s["good"], s["completions"], s["errors"], s["send_s"]) == (3, 4, 1, 1.0)
    assert s["goodput_rps"] == 3 / s["elapsed_s"]


def test_slo_verdicts_and_highest_load(load):
    _, r, _ = load
    slos = r["slo"]["slos"]
    for c in r["cases"]:
        for name, a in c["arms"].items():
            s = c["slo"][name]
            failing = [x["text"] for x in slos if a[x["metric"]] > x["max_ms"]]
            assert s["failing"] == failing and s["meets"] == (not failing)
            per = {}                            # each server's figure: the mean of its windows' percentiles
            for w in a["windows"]:
                per.setdefault(w["server"], []).append(w)
            meeting = sum(all(np.mean([w[x["metric"]] for w in ws]) <= x["max_ms"] for x in slos)
                          for ws in per.values())
            assert (s["servers_meeting"], s["servers"]) == (meeting, 3)
    # slow at 60 req/s: 40 req/s at most, a queue of >= 20 by the window's end, waits beyond 200 ms
    assert not case_of(r, rate=60)["slo"]["slow"]["meets"]
    groups = {g["group"]: g for g in r["slo"]["loads"]}
    assert set(groups) == {"200 words / 1 q, open loop (at most 16 connections)", "200 words / 1 q, closed loop"}
    for g in groups.values():
        loop_cases = [c for c in r["cases"] if bool(c["case"]["rate"]) == (g["loop"] == "open")]
        load_of = {c["label"]: c["case"]["rate"] or c["case"]["concurrency"] for c in loop_cases}
        assert g["loads"] == sorted(load_of.values())
        for name, a in g["arms"].items():
            met = [c for c in loop_cases if c["slo"][name]["meets"]]
            if met:
                best = max(met, key=lambda c: load_of[c["label"]])
                assert (a["highest"], a["load"], a["closest"]) == (best["label"], load_of[best["label"]], None)
                assert a["goodput_rps"] == best["arms"][name]["goodput_rps"]
            else:
                worst = {c["label"]: max(c["arms"][name][x["metric"]] / x["max_ms"] for x in slos) for c in loop_cases}
                close = min(worst, key=worst.get)
                assert a["highest"] is None and a["closest"]["case"] == close
                assert a["closest"]["worst_over_slo"] == pytest.approx(worst[close], rel=1e-12)
    assert groups["200 words / 1 q, open loop (at most 16 connections)"]["arms"]["slow"]["load"] in (None, 10.0)


def test_goodput_gate(load):
    p, r, _ = load
    fired = {g["case"]: g for g in r["gates"]}
    assert set(fired) == {c["label"] for c in r["cases"]}
    for c in r["cases"]:
        (g,) = [ch for ch in c["changes"] if ch["metric"] == "goodput_rps"]
        v = fired[c["label"]]
        assert v["gate"] == "goodput < -2%" and v["metric"] == "goodput_rps"
        assert v["fired"] == (g["ci"] is not None and g["ci"][1] < -2), (v, g)
    # at 60 req/s slow's goodput is a fraction of main's (its queue passes 150 ms within 0.25 s)
    assert fired[case_of(r, rate=60)["label"]]["fired"]
    assert p.returncode == 1 and "gate fired: goodput < -2%" in p.stderr


def test_saturation_open_loop(load):
    _, r, _ = load
    for rate in (10, 60):
        c = case_of(r, rate=rate)
        for name, a in c["arms"].items():
            s = c["saturation"][name]
            offered = sum(w["offered"] for w in a["windows"]) / sum(w["send_s"] for w in a["windows"])
            assert s["offered_rps"] == pytest.approx(offered, rel=1e-12) and s["achieved_rps"] == a["throughput_rps"]
            assert s["achieved_ratio"] == pytest.approx(a["throughput_rps"] / offered, rel=1e-12)
            assert s["saturated"] == (s["achieved_ratio"] < bs.ACHIEVED_MIN)
            assert s["evidence"].startswith(f"achieved {bs._num(a['throughput_rps'])} of {bs._num(offered)} req/s")
            low = case_of(r, rate=10)["arms"][name]
            assert s["latency_growth"]["p99"] == pytest.approx(a["latency_ms_p99"] / low["latency_ms_p99"])
    assert case_of(r, rate=60)["saturation"]["slow"]["saturated"]           # <= 40 of 60 req/s
    assert case_of(r, rate=60)["saturation"]["slow"]["achieved_ratio"] < 0.75
    assert not case_of(r, rate=10)["saturation"]["main"]["saturated"]       # 10 of >= 140 req/s


def test_saturation_closed_loop(load):
    _, r, _ = load
    one, four = case_of(r, concurrency=1, rate=None), case_of(r, concurrency=4, rate=None)
    for name in ("main", "slow"):
        for c in (one, four):
            s, a = c["saturation"][name], c["arms"][name]
            assert s["concurrency_held"] == pytest.approx(a["throughput_rps"] * a["latency_ms_mean"] / 1000)
            # Little's law: a closed loop of C clients holds at most C requests (the client's own
            # time between an answer and the next send is outside)
            assert 0 < s["concurrency_held"] <= 1.05 * c["case"]["concurrency"]
        assert one["saturation"][name]["throughput_elasticity"] is None and not one["saturation"][name]["saturated"]
        s4 = four["saturation"][name]
        e = math.log(four["arms"][name]["throughput_rps"] / one["arms"][name]["throughput_rps"]) / math.log(4)
        assert s4["throughput_elasticity"] == pytest.approx(e)
        assert s4["saturated"] == (e < bs.ELASTICITY_MIN)
    # one request at a time: 4 clients cannot double slow's req/s (<= 40/s; 1 client has > 20/s)
    assert four["saturation"]["slow"]["saturated"]


def test_report_says_goodput_and_saturation(load, capsys):
    from clef_prof.cli.app import main

    _, r, tmp = load
    assert main(["bench", "--from", str(tmp / "run"), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    c60 = case_of(r, rate=60)
    assert f"{c60['label']}: SLO latency_ms_p99<=200 and latency_ms_mean<=150: main " in out
    assert f"slow misses {', '.join(c60['slo']['slow']['failing'])} (" in out
    assert "highest load meeting every SLO, 200 words / 1 q, open loop (at most 16 connections): main " in out
    assert "slow SATURATED: achieved " in out and "saturated below 90%" in out
    assert "req/s grew as C^" in out and "(saturated below C^0.5)" in out
    assert f"{c60['label']}: the servers' queue (GET {r['method']['metrics_url']}): main waiting " in out
    again = main(["bench", "--from", str(tmp / "run"), "-f", "json", *SLOS, "--fail-if", "goodput < -2%"])
    res = json.loads(capsys.readouterr().out)
    assert again == 1 and res["slo"] == r["slo"] and res["gates"] == r["gates"]


@pytest.mark.parametrize("args, line", [
    (["--slo", "p99<=200"], "--slo 'p99<=200': expected METRIC<=MS"),
    (["--slo", "p99_ms>=200"], "--slo 'p99_ms>=200': expected METRIC<=MS"),
    (["--slo", "throughput_rps<=5"], "--slo 'throughput_rps<=5': expected METRIC<=MS"),
    (["--slo", "p99_ms<=0"], "and MS > 0"),
    (["--fail-if", "goodput < -2%"], "--fail-if 'goodput < -2%': goodput needs --slo"),
])
def test_bad_slo_is_one_line(args, line):
    p = bench("--arm", "a=true", "--arm", "b=true", *args, mark=uuid.uuid4().hex, timeout=60)
    assert p.returncode == 1 and line in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_from_refuses_another_slo(load):
    _, _, tmp = load
    p = bench("--from", tmp / "run", "--slo", "p99_ms<=100", mark=uuid.uuid4().hex, timeout=60)
    assert p.returncode == 1 and "differs from the run's (latency_ms_p99<=200, latency_ms_mean<=150)" in p.stderr
    assert "Traceback" not in p.stderr


# ---------------------------------------------------------------------------------------------
# the servers' own /metrics


def test_demo_server_queue_scraped_from_its_metrics(load):
    """The demo server answers GET /metrics, so bench scrapes it by default: its queue depth and the
    batch it runs, per window. One request at a time (--max-batch 1): never more than 1 running, and
    never more queued than the load has connections; slow at 60 req/s keeps a queue."""
    _, r, _ = load
    assert r["method"]["metrics_url"].endswith("/metrics")
    assert not [n for n in r["notes"] if "/metrics" in n]
    for c in r["cases"]:
        cap = c["case"]["concurrency"]
        for a in c["arms"].values():
            ws = a["windows"]
            assert sum(w["metrics_samples"] for w in ws) > 0
            got = [w for w in ws if w["metrics_samples"]]
            for w in got:
                assert 0 <= w["requests_running_mean"] <= w["requests_running_max"] <= 1
                assert 0 <= w["queue_waiting_mean"] <= w["queue_waiting_max"]
                assert w["queue_waiting_max"] <= cap      # the load holds at most C requests open
            sm = a["server_metrics"]
            assert sm["queue_waiting"] == {"mean": pytest.approx(np.mean([w["queue_waiting_mean"] for w in got])),
                                           "max": max(w["queue_waiting_max"] for w in got)}
            assert sm["requests_running"]["max"] == max(w["requests_running_max"] for w in got)
    assert case_of(r, rate=60)["arms"]["slow"]["server_metrics"]["queue_waiting"]["max"] >= 1


def test_exposition_parsed_by_prometheus_client():
    from clef_prof.bench.scrape import ScrapeError, parse

    text = ("# HELP vllm:num_requests_waiting Requests waiting.\n# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="m",engine="0"} 3.0\n'
            'vllm:num_requests_waiting{model_name="m",engine="1"} 2.0\n'
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 7\n"
            "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.5\n")
    assert parse(text) == {"queue_waiting": 5.0, "requests_running": 7.0}
    assert parse("# TYPE other gauge\nother 1\n") == {}
    for bad in ('{"status": "ok"}', "<html><body>no</body></html>", "x{a=\"b\"} notanumber\n"):
        with pytest.raises(ScrapeError, match="not the Prometheus text format"):
            parse(bad)


def test_unreachable_metrics_is_said():
    from clef_prof.bench.scrape import ScrapeError, fetch

    with pytest.raises(ScrapeError, match="refused"):
        fetch(f"http://127.0.0.1:{free_port()}/metrics")


def test_garbage_metrics_url_warns_once_and_the_bench_goes_on(tmp_path):
    """--metrics-url at the demo server's /health (JSON, not the exposition format): one warning
    line for the run, a note, no server figures, and the bench measures on; with 1 server an arm
    the goodput gate is not judged: exit 3."""
    port, mark = free_port(), uuid.uuid4().hex
    p = bench("--arm", f"main={demo(port)}", "--arm", f"pr={demo(port, '--variant', 'pr')}",
              "--url", f"http://127.0.0.1:{port}", "--rounds", 1, "--concurrency", 2, *FAST,
              "--metrics-url", f"http://127.0.0.1:{port}/health", "--slo", "p99_ms<=1000",
              "--fail-if", "goodput < -2%", "-f", "json", "-o", tmp_path / "r.json", mark=mark, timeout=120)
    assert_nothing_left(mark)
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    warn = [ln for ln in p.stderr.splitlines() if ln.startswith("clef-prof: warning:")]
    assert warn == [f"clef-prof: warning: --metrics-url http://127.0.0.1:{port}/health: not the Prometheus text "
                    "format (Invalid labels: \"status\": \"ok\"); server-side metrics not scraped"]
    assert "gate not judged: goodput < -2%" in p.stderr and "not a pass: exit 3" in p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert warn[0].removeprefix("clef-prof: warning: ") in r["notes"]
    (c,) = r["cases"]
    for a in c["arms"].values():
        assert a["server_metrics"] is None and a["completions"] > 0
        assert all("metrics_samples" not in w for w in a["windows"])
    assert c["slo"]["main"]["servers"] == 1 and r["gates"][0]["basis"] == "too few"


# ---------------------------------------------------------------------------------------------
# progress


def test_progress_on_a_terminal_and_piped(tmp_path):
    """On a terminal (stderr a pty): every server's line with its ETA, and each window's line with
    its load point; piped: the server lines only (a log stays short), the same figures either way."""
    import os
    import pty
    import re
    import subprocess
    import sys

    from test_bench import MARK, ROOT

    port = free_port()
    args = ["--arm", f"main={demo(port)}", "--arm", f"pr={demo(port, '--variant', 'pr')}",
            "--url", f"http://127.0.0.1:{port}", "--rounds", 1, "--concurrency", "1,2",
            "--warmup", "0.5", "--windows", 1, "--window-s", 0.5]
    mark = uuid.uuid4().hex
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{MARK: mark})
    p = subprocess.Popen([sys.executable, "-m", "clef_prof", "bench", *map(str, args), "-f", "json"], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:         # the pty closed: the process ended
            break
        if not data:
            break
        chunks.append(data)
    out = p.stdout.read()
    p.wait(120)
    os.close(master)
    assert_nothing_left(mark)
    tty = b"".join(chunks).decode().replace("\r\n", "\n")
    assert p.returncode == 0 and "Traceback" not in tty, tty
    assert re.search(r"^bench: server 1/2: round 1, main, ETA ≈ 3 s plus start-up: ", tty, re.M), tty
    assert re.search(r"^bench: server 2/2: round 1, pr, ETA [0-9]+ s: ", tty, re.M), tty
    for who, order in (("01-main-r1", ("C=1", "C=2")), ("02-pr-r1", ("C=2", "C=1"))):
        for i, c in enumerate(order, 1):
            assert re.search(rf"^bench: {who}: load point {i}/2, {c} 200 words / 1 q, window 1/1: [0-9.]+ req/s",
                             tty, re.M), tty
    piped = bench(*args, "--metrics-url", "none", "-f", "json", mark=uuid.uuid4().hex, timeout=120)
    assert piped.returncode == 0
    assert "bench: server 2/2: round 1, pr, ETA " in piped.stderr and "load point" not in piped.stderr
    # the demo server's /metrics is scraped by default; `--metrics-url none` scrapes nothing
    windows = {k: [w for c in json.loads(o)["cases"] for a in c["arms"].values() for w in a["windows"]]
               for k, o in (("tty", out), ("piped", piped.stdout))}
    assert all(w["metrics_samples"] >= 0 and "metrics_samples" in w for w in windows["tty"])
    assert json.loads(piped.stdout)["method"]["metrics_url"] is None
    assert not [w for w in windows["piped"] if "metrics_samples" in w]


def test_capacity_at_the_highest_saturated_load(load):
    """Per load group and arm: req/s at the highest saturated load point, with the t interval of its
    servers' figures on logs (3 servers: t(0.975, 2) = 4.3027, the t table's); slow's is below the
    40 req/s that one request at a time of 25 ms allows."""
    _, r, _ = load
    groups = {g["group"]: g for g in r["capacity"]}
    assert set(groups) == {g["group"] for g in r["slo"]["loads"]}
    for g in groups.values():
        loop_cases = [c for c in r["cases"] if bool(c["case"]["rate"]) == (g["loop"] == "open")]
        for name, a in g["arms"].items():
            sat = [c for c in loop_cases if c["saturation"][name]["saturated"]]
            if not sat:
                assert a is None
                continue
            c = max(sat, key=lambda c: c["case"]["rate"] or c["case"]["concurrency"])
            logs = np.log(c["arms"][name]["server_rps"])
            half = 4.3027 * np.std(logs, ddof=1) / np.sqrt(3)
            assert (a["case"], a["capacity_rps"], a["servers"]) == (c["label"], c["arms"][name]["throughput_rps"], 3)
            assert a["ci"] == pytest.approx([np.exp(logs.mean() - half), np.exp(logs.mean() + half)], rel=1e-4)
    slow = groups["200 words / 1 q, open loop (at most 16 connections)"]["arms"]["slow"]
    assert slow["case"] == case_of(r, rate=60)["label"] and slow["capacity_rps"] <= 40
