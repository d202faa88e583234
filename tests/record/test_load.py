"""The load generator (clef_prof.record.load) against real server processes: the demo server,
a server with canned answers (tests/programs/canned_http.py) for each framing and failure, and a
port nothing listens on; its latency percentile against NumPy's."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from clef_prof.base.errors import ClefError
from clef_prof.record import load as loadgen
from clicheck import assert_one_line, run_main
from httpcheck import free_port

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
CANNED = ROOT / "tests" / "programs" / "canned_http.py"


@pytest.fixture(scope="module")
def canned():
    p = subprocess.Popen([sys.executable, str(CANNED)], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{int(p.stdout.readline())}"
    finally:
        p.kill()
        p.wait()


def stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def demo_server(*args) -> tuple[subprocess.Popen, str]:
    """A demo server on a free port, once it is warm and listening: (process, base URL)."""
    p = subprocess.Popen([sys.executable, "-m", "clef_prof", "demo-server", "--port", "0", *args], cwd=ROOT, env=ENV,
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"listening on (http://\S+)", line)
    assert m, line
    return p, m.group(1)


def stop_demo(p: subprocess.Popen) -> str:
    """SIGINT the demo server; its last stderr lines."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    p.wait(30)
    return p.stderr.read()


def run_load(url: str, seconds: float, grace_s: float = 5.0, **settings) -> loadgen.Load:
    load = loadgen.Load(loadgen.LoadSettings(url=url, **settings)).start()
    time.sleep(seconds)
    load.stop(grace_s)
    return load


def post(url: str, timeout_s: float = 5.0, keep: int | None = None) -> tuple[int, bytes, str | None]:
    async def go():
        async with loadgen.client_session(1) as s:
            return await loadgen.post(s, url, b'{"x": 1}', timeout_s, keep)
    return asyncio.run(go())


# --------------------------------------------------------------------------------------------
# one request: each framing and failure


def test_every_request_carries_its_own_request_id(canned):
    """X-Request-Id on every request, never repeated, one tag per load: servers that read it (vLLM,
    SGLang, the demo server) name their request ranges and batch ids after it (docs/journey.md)."""
    load = run_load(canned, 0.5, path="/ids", concurrency=4)
    ids = stats(canned)["request_ids"]
    assert len(ids) == load.summary()["completions"] + load.summary()["errors"] > 20
    assert len(set(ids)) == len(ids) and None not in ids
    tags = {i.rsplit("-", 1)[0] for i in ids}
    nums = sorted(int(i.rsplit("-", 1)[1]) for i in ids)
    # client c of 4 numbers its requests c, c + 4, c + 8, ... (the clients may stop a few
    # requests apart): every number's predecessor on its client was sent too, each client sent
    assert tags == {load.id_tag} and {n % 4 for n in nums} == {0, 1, 2, 3}
    assert all((n - 4) in set(nums) for n in nums if n >= 4)


def test_the_id_goes_into_the_body_field_asked(canned, tmp_path):
    """--request-id-field rid (record --preset sglang's default): each body carries its request's
    X-Request-Id in that field, replacing one the body had, the rest of the body unchanged."""
    body = tmp_path / "b.json"
    body.write_text(json.dumps({"input": "a text", "rid": "fixed", "n": [1, 2]}))
    before = len(stats(canned)["bodies"])
    run_load(canned, 0.4, path="/ids", concurrency=3, body_file=str(body), id_field="rid")
    got = stats(canned)
    sent, ids = got["bodies"][before:], got["request_ids"][before:]
    assert len(sent) == len(ids) > 10
    assert [b["rid"] for b in sent] == ids and len(set(ids)) == len(ids)
    assert all({k: v for k, v in b.items() if k != "rid"} == {"input": "a text", "n": [1, 2]} for b in sent)


@pytest.mark.parametrize("body,why", [(b"[1, 2]", "not a JSON object"), (b"{oops", "not JSON")])
def test_an_id_field_needs_a_json_object_body(body, why):
    with pytest.raises(ClefError, match=why):
        loadgen.id_stamp(body, "rid")
    head, tail = loadgen.id_stamp(b"{}", "rid")
    assert json.loads(head + b'"x-1"' + tail) == {"rid": "x-1"}


def test_sglang_preset_sends_the_rid_in_the_body(tmp_path):
    from clef_prof.cli.app import build_parser
    from clef_prof.cli.record import config_from
    for preset, field in (("sglang", "rid"), ("vllm", None), ("generic", None)):
        args = build_parser().parse_args(["record", "--out", str(tmp_path), "--preset", preset, "--", "srv"])
        assert config_from(args, ["srv"]).load.id_field == field
    args = build_parser().parse_args(["record", "--out", str(tmp_path), "--request-id-field", "request_id", "--", "srv"])
    assert config_from(args, ["srv"]).load.id_field == "request_id"


@pytest.mark.parametrize("path", ["/ok", "/chunked", "/http10", "/close"])
def test_post_reads_every_framing_whole(canned, path):
    assert post(canned + path) == (200, json.dumps({"path": path, "got": 8}).encode(), None)


def test_post_error_kinds(canned):
    assert post(canned + "/error") == (500, b"model exploded while pooling", None)
    assert post(canned + "/reset") == (0, b"", "server disconnected")
    assert post(canned + "/short") == (0, b"", "answer cut short")
    t0 = time.monotonic()
    assert post(canned + "/slow", timeout_s=0.3) == (0, b"", "timeout after 0.3 s")
    assert time.monotonic() - t0 < 3
    assert post(f"http://127.0.0.1:{free_port()}/ok") == (0, b"", "connection refused")


@pytest.mark.parametrize("path, kind", [("/bad-status", "malformed answer (Bad status line)"),
                                        ("/bad-chunk-size", "malformed answer (Invalid character in chunk size)"),
                                        ("/bad-gzip", "malformed answer (Can not decode content-encoding: gzip)")])
def test_malformed_answers_are_their_own_kind(canned, path, kind):
    """An answer HTTP cannot read is neither a connection error with the HTTP 400 that aiohttp's
    parser uses internally (the server sent no 400), nor a body cut short when it came whole in a
    Content-Encoding it is not in; one line, so that errors group by kind."""
    assert post(canned + path) == (0, b"", kind)
    s = run_load(canned, 0.3, path=path, concurrency=2).summary()
    assert s["completions"] == 0 and s["error_kinds"] == {kind: s["errors"]} and s["errors"] >= 2


def test_answers_that_are_not_errors_and_redirects(canned):
    """1xx before the answer is skipped, 204 has no body, and a redirect is not followed (the
    latency is one answer of the server named): the loop counts it as an HTTP error."""
    assert post(canned + "/continue") == (200, json.dumps({"path": "/ok", "got": 8}).encode(), None)
    assert post(canned + "/no-content") == (204, b"", None)
    assert post(canned + "/redirect") == (302, b"", None)
    before = stats(canned)["answered"]
    s = run_load(canned, 0.3, path="/redirect", concurrency=1).summary()
    after = stats(canned)["answered"]
    assert after.get("/ok", 0) == before.get("/ok", 0)
    assert s["error_kinds"] == {"HTTP 302": s["errors"]} and s["errors"] == after["/redirect"] - before["/redirect"]


def test_answers_are_kept_up_to_64_mib(canned):
    """An answer kept whole (bench's checks and parity) is read up to 64 MiB; a body that never
    ends is dropped past that (the timeout alone let every client hold what the server sent
    until then: 2 clients held 1.2 GB in 3 s), and its connection closed, not reused. The load
    keeps the first KEEP_TEXT bytes of each answer and reads the rest without holding it: an
    answer of any size completes, and one that never ends times out."""
    status, data, err = post(canned + "/big", timeout_s=60)
    assert (status, len(data), err) == (200, loadgen.MAX_ANSWER, None) and json.loads(data) == "x" * (len(data) - 2)
    assert post(canned + "/flood", timeout_s=60) == (0, b"", "answer over 64 MiB")
    assert post(canned + "/gzip") == (200, json.dumps({"path": "/ok", "got": 8}).encode(), None)
    assert post(canned + "/big", 60, keep=loadgen.KEEP_TEXT) == (200, b'"' + b"x" * (loadgen.KEEP_TEXT - 1), None)
    s = run_load(canned, 1.5, path="/big", concurrency=2, timeout_s=60).summary()
    assert s["errors"] == 0 and s["completions"] >= 2
    s = run_load(canned, 0.5, path="/flood", concurrency=2, timeout_s=1).summary()
    assert s["completions"] == 0 and set(s["error_kinds"]) <= {"timeout after 1 s"}


@pytest.mark.parametrize("path", ["/endless-head", "/endless-body"])
def test_timeout_covers_headers_and_body_that_never_end(canned, path):
    assert post(canned + path, timeout_s=0.3) == (0, b"", "timeout after 0.3 s")


# --------------------------------------------------------------------------------------------
# the closed loop


def test_keep_alive_one_connection_per_client(canned):
    before = stats(canned)
    load = run_load(canned, 0.5, path="/ok", concurrency=3)
    after = stats(canned)
    s = load.summary()
    answered = after["answered"].get("/ok", 0) - before["answered"].get("/ok", 0)
    assert s["errors"] == 0 and s["completions"] == answered > 3
    assert after["connections"] - before["connections"] - 1 == 3      # less the /stats call
    assert load.cancelled == 0 and load.unfinished == []


@pytest.mark.parametrize("path", ["/chunked", "/http10", "/close"])
def test_closed_connections_are_replaced(canned, path):
    """Answers that end their connection: every request opens a new one, none fails."""
    before = stats(canned)
    load = run_load(canned, 0.5, path=path, concurrency=2)
    after = stats(canned)
    s = load.summary()
    answered = after["answered"].get(path, 0) - before["answered"].get(path, 0)
    assert s["errors"] == 0 and s["completions"] == answered > 2
    opened = after["connections"] - before["connections"] - 1      # less the /stats call
    assert opened == (2 if path == "/chunked" else answered)


def test_http_errors_keep_the_start_of_the_body(canned):
    s = run_load(canned, 0.3, path="/error", concurrency=2).summary()
    assert s["completions"] == 0 and s["errors"] > 2
    assert s["error_kinds"] == {"HTTP 500: model exploded while pooling": s["errors"]}


def test_resets_and_refusals_do_not_spin(canned):
    """A client waits 50 ms after a request that got no answer: 2 clients in 0.5 s send at most ~22."""
    s = run_load(canned, 0.5, path="/reset", concurrency=2).summary()
    assert s["error_kinds"] == {"server disconnected": s["errors"]} and 2 <= s["errors"] <= 26
    s = run_load(f"http://127.0.0.1:{free_port()}", 0.5, concurrency=2).summary()
    assert s["error_kinds"] == {"connection refused": s["errors"]} and 2 <= s["errors"] <= 26


def test_timeouts(canned):
    s = run_load(canned, 0.7, path="/slow", concurrency=2, timeout_s=0.2).summary()
    assert s["completions"] == 0 and s["error_kinds"] == {"timeout after 0.2 s": s["errors"]}
    assert 2 <= s["errors"] <= 8


def test_unfinished_requests_are_counted_at_stop(canned):
    """Requests still in flight when the grace ends are cancelled; their send times bound the window."""
    t0 = time.time_ns()
    load = run_load(canned, 0.3, grace_s=0.2, path="/slow", concurrency=4)
    t1 = time.time_ns()
    assert load.done == [] and load.cancelled == 4
    assert len(load.unfinished) == 4 and all(t0 <= t <= t1 for t in load.unfinished)
    assert load.bounds(t0, t1) == (0, 4)
    assert load.bounds(t0, t0 - 1) == (0, 0)      # sent after the window


def test_a_client_pausing_after_an_error_is_not_a_cancelled_request():
    """After a request that got no answer a client pauses 50 ms; cancelled in that pause at stop,
    it had no request in flight (the failed one is counted among the errors): only requests in
    flight count as cancelled, each once."""
    load = run_load(f"http://127.0.0.1:{free_port()}", 0.3, grace_s=0.0, concurrency=8)
    assert load.cancelled == len(load.unfinished) < 8
    assert load.summary()["errors"] == len(load.done) > 0


def test_request_body_file_is_sent_every_time(canned, tmp_path):
    body = tmp_path / "body.json"
    body.write_text('{"model": "m", "input": "' + "x" * 100 + '"}')
    load = loadgen.Load(loadgen.LoadSettings(url=canned, path="/ok", concurrency=1, body_file=str(body)))
    assert load.bodies == [body.read_bytes()]
    body.write_text("not json")
    with pytest.raises(ClefError, match="not a readable JSON file"):
        loadgen.Load(loadgen.LoadSettings(url=canned, body_file=str(body)))


@pytest.mark.parametrize("url", ["ftp://h:1", "http://", "http://h:99999", "http://h:port", "http://[::1",
                                 "http://[zz]:1", "http://a..b:80", "http://" + "a" * 64 + ".example:80"])
def test_bad_urls(url):
    with pytest.raises(ClefError, match="expected an http:// or https:// URL"):
        loadgen.Load(loadgen.LoadSettings(url=url))


@pytest.mark.parametrize("option, value, needle", [
    ("--request-timeout", "0", "--request-timeout must be a positive number of seconds"),
    ("--request-timeout", "-1", "--request-timeout must be a positive number of seconds"),
    ("--request-timeout", "nan", "--request-timeout must be a positive number of seconds"),
    ("--request-timeout", "inf", "--request-timeout must be a positive number of seconds"),
    ("--duration", "-1", "--duration must be a positive number of seconds"),
    ("--duration", "nan", "--duration must be a positive number of seconds"),
    ("--duration", "inf", "--duration must be a positive number of seconds")])
def test_load_cli_refuses_timeouts_and_durations_that_are_not_positive(canned, option, value, needle):
    """aiohttp reads a timeout of 0, below 0 or NaN as none at all (a request to a server that
    never answers waited forever), and an infinite one failed every client with OverflowError;
    an infinite --duration was an internal error, NaN or below 0 ran no load ("in nan s")."""
    p = run_main("load", "--url", canned, "--request-path", "/ok", "--duration", "0.1", option, value)
    assert_one_line(p, 1, needle)
    assert p.stdout == ""


def test_urls_that_pass_the_check_reach_the_server(canned):
    """A path prefix, an IPv6 literal: every request reaches the server at the path meant; a name
    no lookup finds is counted as an error of each request."""
    port = canned.rsplit(":", 1)[1]
    before = stats(canned)["answered"].get("/prefix/ok", 0)
    load = run_load(f"http://127.0.0.1:{port}/prefix/", 0.2, path="/ok", concurrency=1)
    s = load.summary()
    assert load.url == f"http://127.0.0.1:{port}/prefix/ok"
    assert s["error_kinds"] == {"HTTP 404": s["errors"]} == {"HTTP 404": stats(canned)["answered"]["/prefix/ok"] - before}
    v6 = subprocess.Popen([sys.executable, str(CANNED), "::1"], stdout=subprocess.PIPE, text=True)
    try:
        s = run_load(f"http://[::1]:{int(v6.stdout.readline())}", 0.2, path="/ok", concurrency=2).summary()
    finally:
        v6.kill()
        v6.wait()
    assert s["completions"] > 0 and s["errors"] == 0
    s = run_load("http://ä.invalid:80", 0.2, concurrency=1).summary()
    assert s["completions"] == 0 and s["errors"] > 0 and all(k.startswith("cannot connect") for k in s["error_kinds"])


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
# the demo server


def test_every_request_the_demo_server_answered_is_counted():
    p, url = demo_server("--variant", "pr")
    try:
        load = run_load(url, 1.0, concurrency=8, words=50)
    finally:
        tail = stop_demo(p)
    served = int(re.search(r"stopped after (\d+) requests", tail).group(1))
    s = load.summary()
    assert s["errors"] == 0 and s["completions"] == served > 8 and load.cancelled == 0
    assert s["latency_ms_p50"] <= s["latency_ms_p99"]


def test_demo_server_dying_mid_load():
    """The server SIGKILLs itself inside the batch that reaches 20 requests: that batch is never
    answered, the connections in flight are lost, and then nothing listens."""
    p, url = demo_server("--die-after-requests", "20")
    try:
        load = run_load(url, 1.5, concurrency=4, words=20)
    finally:
        stop_demo(p)
    s = load.summary()
    assert p.returncode == -signal.SIGKILL
    assert 16 <= s["completions"] < 20
    assert set(s["error_kinds"]) <= {"server disconnected", "connection reset", "connection refused",
                                     "answer cut short"}
    assert s["error_kinds"].get("connection refused", 0) > 0 and s["errors"] <= 4 * (1.5 / 0.05 + 2)


def test_the_load_measures_its_own_loop_lag(canned):
    """The summary of a span holds how late the client loop's probe woke (mean and p99, ms):
    what the client check allows for the client's own wait. A probe wakes every 5 ms, so a 0.6 s
    run holds about 100 of them, each late by at least 0."""
    load = run_load(canned, 0.6, concurrency=4)
    s = load.summary()
    assert 40 <= len(load.lags) <= 130
    lags = sorted(lag / 1e6 for _, lag in load.lags)
    assert s["loop_lag_ms_mean"] == pytest.approx(sum(lags) / len(lags), rel=1e-12)
    assert 0 <= s["loop_lag_ms_mean"] <= s["loop_lag_ms_p99"] <= lags[-1]
    t0 = load.lags[len(load.lags) // 2][0]
    half = load.summary(t0, None)
    assert half["loop_lag_ms_mean"] == pytest.approx(
        sum(lag for t, lag in load.lags if t > t0) / 1e6 / sum(1 for t, _ in load.lags if t > t0), rel=1e-12)
