"""analyze's check of a capture against its record manifest (clef_prof.analyze.read.manifest.check_manifest):
the client's bounds on the requests recorded, a dead server, the server's own count, a manifest
of another export, and windows that vLLM's max_iterations ended early."""
from __future__ import annotations

from dataclasses import replace

from clef_prof.analyze.judge.manifest import check_manifest


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


def _manifest(steps, inside=30, overlapping=40):
    return {"status": "ok", "load": {"concurrency": 4},
            "window": {"mode": "profiler-api", "max_iterations": steps},
            "client": {"window": {"completions": 400}, "window_outer": {"completions": 410},
                       "capture": {"requests_inside": inside, "requests_overlapping": overlapping, "recorded_s": 0.05}}}


def test_completions_check_understands_max_iterations(slice_result):
    """A window that max_iterations ended early is judged on the span the export recorded (record
    bounds the client's requests by it), not on the wall-clock window up to /stop_profile, whose
    400 completions would be a false alarm."""
    result = replace(slice_result, requests=32, requests_source="message n=K")
    assert check_manifest(result, _manifest(8)) == []
    assert check_manifest(result, _manifest(None)) == []
    lost = check_manifest(replace(result, requests=12), _manifest(8))
    assert len(lost) == 1 and "batch ranges were lost" in lost[0]
    extra = check_manifest(replace(result, requests=900), _manifest(8))
    assert len(extra) == 1 and "requests this client did not send" in extra[0]
