"""The demo server (clef_prof.record.demo_server): the pooler's bookkeeping on the CPU path, and the HTTP
server as a real process: endpoints, the profile window's counts, batching under load, start-up failures."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clef_prof.base.errors import ClefError
from clef_prof.record import demo_server as ds, load as loadgen
from httpcheck import call, free_port, REQ

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


class Server:
    def __init__(self, *args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.p = subprocess.Popen([sys.executable, "-m", "clef_prof", "demo-server", "--port", str(self.port), *args],
                                  cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True)

    def wait_healthy(self, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.p.poll() is None, self.p.stderr.read()
            try:
                if call("GET", self.url + "/health", timeout=1)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("demo server not healthy")

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


@pytest.fixture
def server(request):
    started = []

    def start(*args):
        s = Server(*args)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


# --------------------------------------------------------------------------------------------
# the pooler's bookkeeping

def test_metadata_is_9_tensors_of_3424_bytes():
    meta = ds.index_request(ds.parse_request(json.dumps(REQ).encode()))
    assert [len(m) for m in meta] == list(ds.META_SIZES)
    assert 8 * sum(len(m) for m in meta) == 3424


@pytest.mark.parametrize("variant,copies", [("main", 9), ("pr", 3)])
def test_cpu_transfer_copies_per_request(variant, copies):
    pooler = ds.CpuPooler(variant)
    metas = [ds.index_request(ds.parse_request(b)) for b in loadgen.make_bodies(200, 1, n=5)]
    dev = pooler.transfer(metas)
    assert [len(bufs) for bufs in dev] == [copies] * 5
    assert all(sum(len(b) for b in bufs) == 3424 for bufs in dev)
    scores = pooler.head(dev)
    assert len(scores) == 5 and all(0 <= s < 1 for s in scores)


@pytest.mark.parametrize("sync", ds.SYNC_MODES)
def test_cpu_path_runs_with_every_sync_mode(sync):
    pooler = ds.make_pooler("pr", "cpu", sync)          # no GPU to wait for: --sync is a no-op here
    metas = [ds.index_request(ds.parse_request(b)) for b in loadgen.make_bodies(200, 1, n=3)]
    assert pooler.sync == sync and len(pooler.head(pooler.transfer(metas))) == 3
    with pytest.raises(ClefError):
        ds.make_pooler("pr", "cpu", "always")


def test_parse_rejects_bad_requests():
    for body in (b"not json", b'{"state": 1}', b'{"state": "x", "questions": {}}', b'{"state": "x", "questions": {"a": 1}}'):
        with pytest.raises(ds.BadRequest):
            ds.parse_request(body)


# --------------------------------------------------------------------------------------------
# the HTTP server

def test_endpoints_and_profile_window_counts(server):
    s = server("--variant", "main").wait_healthy()
    st, body = call("GET", s.url + "/version")
    info = json.loads(body)
    assert st == 200 and info["variant"] == "main" and info["device"] == "cpu"
    st, body = call("POST", s.url + "/v1/systemone", REQ)
    out = json.loads(body)
    assert st == 200 and set(out["answers"]) == {"pain", "severity"} and out["words"] == 7
    assert call("POST", s.url + "/v1/systemone", b"{nope")[0] == 400
    assert call("POST", s.url + "/nowhere", REQ)[0] == 404
    assert call("GET", s.url + "/nowhere")[0] == 404
    st, body = call("POST", s.url + "/start_profile")
    assert st == 200 and json.loads(body)["status"] == "profiling"
    for _ in range(5):
        assert call("POST", s.url + "/v1/systemone", REQ)[0] == 200
    st, body = call("POST", s.url + "/stop_profile")
    counts = json.loads(body)
    assert st == 200 and counts["requests"] == 5 and 1 <= counts["batches"] <= 5
    assert s.stop() == 0
    assert "stopped after" in s.p.stderr.read()


def test_metrics_endpoint_in_the_prometheus_text_format(server):
    """GET /metrics parses with prometheus_client's parser: idle, nothing waits or runs; the counters
    count the requests and batches run since warm-up (4 one at a time, and a bad body: 5 requests)."""
    from prometheus_client.parser import text_string_to_metric_families

    s = server("--variant", "main", "--device", "cpu").wait_healthy()
    for _ in range(4):
        assert call("POST", s.url + "/v1/systemone", REQ)[0] == 200
    assert call("POST", s.url + "/v1/systemone", b"{nope")[0] == 400
    st, body = call("GET", s.url + "/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert st == 200 and {n: f.type for n, f in fams.items()} == {
        "clef_demo_num_requests_waiting": "gauge", "clef_demo_num_requests_running": "gauge",
        "clef_demo_requests": "counter", "clef_demo_batches": "counter"}
    values = {n: f.samples[0].value for n, f in fams.items()}
    assert values == {"clef_demo_num_requests_waiting": 0, "clef_demo_num_requests_running": 0,
                      "clef_demo_requests": 5, "clef_demo_batches": 5}


def test_batches_hold_up_to_16_requests_under_load(server):
    s = server("--variant", "pr").wait_healthy()
    load = loadgen.Load(loadgen.LoadSettings(url=s.url, concurrency=24, words=50)).start()
    time.sleep(0.5)
    opening = time.time_ns()
    call("POST", s.url + "/start_profile")
    t0 = time.time_ns()
    time.sleep(1.5)
    t1 = time.time_ns()
    counts = json.loads(call("POST", s.url + "/stop_profile")[1])
    closed = time.time_ns()
    load.stop(2.0)
    summ = load.summary(t0, t1)
    assert summ["completions"] > 20 and summ["errors"] == 0
    assert summ["latency_ms_p50"] <= summ["latency_ms_p99"]
    # the server's window lies inside [opening, closed] and holds [t0, t1]: the client's bounds
    inside, _ = load.bounds(t0, t1)
    _, overlapping = load.bounds(opening, closed)
    assert 0 < inside <= counts["requests"] <= overlapping, (inside, counts, overlapping)
    assert inside <= summ["completions"] <= overlapping
    # 24 clients, batches of at most 16
    assert counts["requests"] / counts["batches"] <= 16


def test_no_profile_endpoints_answer_404(server):
    s = server("--no-profile-endpoints").wait_healthy()
    assert call("POST", s.url + "/start_profile")[0] == 404
    assert call("POST", s.url + "/v1/systemone", REQ)[0] == 200


def test_fail_at_start_and_port_in_use():
    p = subprocess.run([sys.executable, "-m", "clef_prof", "demo-server", "--fail-at-start"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "simulated start-up failure" in p.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        p = subprocess.run([sys.executable, "-m", "clef_prof", "demo-server", "--port", str(port)], cwd=ROOT,
                           env=ENV, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.strip().count("\n") == 0 and "cannot listen" in p.stderr
