"""The demo server, the load generator, the manifest check and the light entry points (no nsys)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from clef_prof.analyze.manifest import check_manifest
from clef_prof.record import ab, demo_server as ds, load as loadgen, manifest as mf, procs

from clef_prof import nsys as nsys_mod
from clef_prof.errors import ClefError

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(method, url, body=None, timeout=10):
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data if data is not None else (b"" if method == "POST" else None),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


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


REQ = {"state": "the patient reports mild pain after surgery", "questions": {
    "pain": {"type": "boolean", "instructions": "Is there pain?", "criteria": "explicit mention"},
    "severity": {"type": "score", "instructions": "How severe?", "criteria": "0-1"}}}


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


def test_load_counts_refused_connections_as_errors():
    port = free_port()
    load = loadgen.Load(loadgen.LoadSettings(url=f"http://127.0.0.1:{port}", concurrency=2)).start()
    time.sleep(0.3)
    load.stop(1.0)
    s = load.summary()
    assert s["completions"] == 0 and s["errors"] > 0
    assert any("Connection" in k or "refused" in k.lower() for k in s["error_kinds"])


def test_percentile_matches_numpy():
    import numpy as np
    vals = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0])
    for q in (0, 50, 90, 99, 100):
        assert loadgen.percentile(vals, q) == pytest.approx(float(np.percentile(vals, q)))
    assert loadgen.percentile([], 50) is None


# --------------------------------------------------------------------------------------------
# manifest check, ab schedule

def _m(**kw):
    m = {"status": "ok", "export": "capture.sqlite", "load": {"concurrency": 16},
         "client": {"window": {"completions": 1000},
                    "capture": {"completions": 1010, "recorded_s": 2.0, "requests_inside": 1000,
                                "requests_overlapping": 1030}}, "window": {"mode": "nsys"}}
    m.update(kw)
    return m


def test_check_manifest(slice_result):
    ok = replace(slice_result, path="/x/capture.sqlite", requests=1020, requests_source="message n=K")
    assert check_manifest(ok, _m()) == []
    # the client's bounds hold exactly: one request below or above is a warning
    assert check_manifest(replace(ok, requests=1000), _m()) == []
    assert check_manifest(replace(ok, requests=1030), _m()) == []
    (lost,) = check_manifest(replace(ok, requests=999), _m())
    assert "count 999 requests" in lost and "1000 requests sent and answered" in lost and "were lost" in lost
    (extra,) = check_manifest(replace(ok, requests=1031), _m())
    assert "1030 in flight" in extra and "did not send" in extra
    died = check_manifest(ok, _m(status="server died", status_detail="the server exited inside the window"))
    assert len(died) == 1 and "server died" in died[0]
    assert check_manifest(replace(ok, requests_source="--requests", requests=5), _m()) == []
    assert check_manifest(ok, _m(client={"window": {"completions": None}})) == []
    assert any("describes" in w for w in check_manifest(replace(ok, path="/x/other.sqlite"), _m()))
    # the server's own count: a cudaProfilerApi window is the capture, up to the edges
    srv = _m(server_counts={"requests": 1000}, window={"mode": "profiler-api"})
    assert check_manifest(ok, srv) == []
    srv["server_counts"]["requests"] = 1300
    assert any("server counted 1300" in w for w in check_manifest(ok, srv))


def test_ab_schedule_and_arms():
    assert ab.schedule(["main", "pr"], 2, "ABBA") == [(1, "main"), (1, "pr"), (2, "pr"), (2, "main")]
    assert ab.schedule(["main", "pr"], 2, "AB") == [(1, "main"), (1, "pr"), (2, "main"), (2, "pr")]
    arms = ab.parse_arms(["main=python -m s --variant main", "pr=python -m s 'a b'"])
    assert arms == [("main", ["python", "-m", "s", "--variant", "main"]), ("pr", ["python", "-m", "s", "a b"])]
    for bad in (["main=x"], ["main", "pr=x"], ["m/a=x", "pr=y"], ["a=x", "a=y"]):
        with pytest.raises(Exception):
            ab.parse_arms(bad)


# --------------------------------------------------------------------------------------------
# portability: no pandas, numpy, rich or pyarrow on the record / demo path

def test_entry_points_run_without_pandas_numpy_rich(tmp_path):
    block = tmp_path / "block"
    for m in ("pandas", "numpy", "rich", "pyarrow", "adbc_driver_sqlite", "torch", "aiohttp"):
        (block / m).mkdir(parents=True)
        (block / m / "__init__.py").write_text(f"raise ImportError('{m} is blocked in this test')\n")
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(block), str(ROOT)]))
    code = ("import sys; import clef_prof, clef_prof.record.session, clef_prof.record.demo_server, clef_prof.record.ab, clef_prof.record.load, "
            "clef_prof.record.manifest, clef_prof.nsys, clef_prof.record.procs, clef_prof.cli.app, clef_prof.cli.record, clef_prof.cli.ab, "
            "clef_prof.cli.demo_server, clef_prof.cli.load; clef_prof.cli.app.build_parser(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas','numpy','rich','pyarrow')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr
    for argv in (["-m", "clef_prof", "record", "--out", str(tmp_path / "o"), "--dry-run", "--", "srv"],
                 ["-m", "clef_prof", "ab", "--arm", "a=x", "--arm", "b=y", "--out", str(tmp_path / "o"), "--dry-run"]):
        p = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "--trace=cuda,nvtx,osrt" in p.stdout, p.stderr
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "clef_prof", "demo-server", "--port", str(port), "--device", "auto"],
                           cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            try:
                if call("GET", f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        assert call("POST", f"http://127.0.0.1:{port}/v1/systemone", REQ)[0] == 200
    finally:
        srv.send_signal(signal.SIGINT)
        assert srv.wait(15) == 0, srv.stderr.read()


# --------------------------------------------------------------------------------------------
# locating nsys, process markers

@pytest.mark.nsys("2023.4")
def test_locate_nsys_forms(monkeypatch):
    inst = ROOT / ".nsys" / "2023.4"
    for form in (inst, inst / "nsys", inst / "target-linux-x64", inst / "target-linux-x64" / "nsys"):
        assert os.path.basename(nsys_mod.locate(str(form))) == "nsys"
    monkeypatch.setenv(nsys_mod.ENV_NSYS, str(inst))
    assert nsys_mod.locate() == str(inst / "nsys")
    monkeypatch.setenv(nsys_mod.ENV_NSYS, "/nonexistent/nsys")
    with pytest.raises(nsys_mod.NsysMissing, match="CLEF_PROF_NSYS"):
        nsys_mod.locate()


@pytest.mark.nsys("2022.4")
def test_nsys_2022_has_no_python_sampling():
    n22 = ROOT / ".nsys" / "2022.4" / "nsys"
    n = nsys_mod.Nsys.find(str(n22))
    notes = []
    cmd = nsys_mod.profile_command(n, nsys_mod.TraceOptions(), "/tmp/x", ["srv"], session="s", notes=notes)
    assert not any("python-sampling" in c for c in cmd) and "--capture-range=cudaProfilerApi" in cmd
    assert notes and "python-sampling" in notes[0]


def test_marked_processes_are_found_and_ended():
    token = uuid.uuid4().hex
    env = dict(os.environ, **{procs.ENV_MARK: token})
    # a child that ignores SIGINT and SIGTERM, in a session of its own (as nsys' agent is)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                              "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                             env=env, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert [p.pid for p in procs.marked(token)] == [child.pid]
        assert procs.terminate_marked(token, timeouts=(0.3, 0.3, 2.0)) == []
        assert child.wait(5) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
