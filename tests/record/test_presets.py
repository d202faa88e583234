"""The record presets: the nsys and server commands and environment they build (dry runs and
plans, no server), the --window auto probe against live HTTP servers, and vLLM's max_iterations
read from the start body or the profiler config."""
from __future__ import annotations

import http.server
import threading

import pytest

from clef_prof.base.nsys import Nsys
from clef_prof.cli.record import config_from
from clef_prof.record.plan import plan
from clef_prof.record.presets import max_iterations
from clef_prof.record.session import Recording
from clef_prof.cli import app as cli


def build(argv: list[str], server: list[str], monkeypatch, gpu: bool = False):
    for where in ("plan", "session"):
        monkeypatch.setattr(f"clef_prof.record.{where}.gpu_present", lambda: gpu)
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    args = cli.build_parser().parse_args(["record", "--out", "/tmp/x", *argv, "--", *server])
    cfg = config_from(args, server)
    return cfg, plan(cfg, Nsys.assumed())


def test_vllm_preset_adds_the_profiler_config_spawn_and_node(monkeypatch):
    cfg, pl = build(["--preset", "vllm"], ["vllm", "serve", "M"], monkeypatch, gpu=True)
    assert pl.server == ["vllm", "serve", "M", "--profiler-config", '{"profiler": "cuda"}']
    assert pl.main[-5:] == pl.server[-5:]
    assert pl.env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert pl.window == "profiler-api"
    assert "--capture-range=cudaProfilerApi" in pl.main and "--cuda-graph-trace=node" in pl.main
    assert "--trace-fork-before-exec=true" in pl.main
    assert any("added --profiler-config" in n for n in pl.notes)
    assert cfg.url == "http://127.0.0.1:8000"


@pytest.mark.parametrize("given", [["--profiler-config", '{"profiler": "cuda", "max_iterations": 5}'],
                                   ['--profiler-config={"profiler": "cuda"}'],
                                   ["--profiler-config.profiler", "cuda"]])
def test_vllm_preset_keeps_the_users_profiler_config(monkeypatch, given):
    cfg, pl = build(["--preset", "vllm", "--cuda-graph-trace", "graph"], ["vllm", "serve", "M", *given], monkeypatch)
    assert pl.server == ["vllm", "serve", "M", *given]
    assert not any("added --profiler-config" in n for n in pl.notes)
    assert "--cuda-graph-trace=graph" in pl.main


def test_vllm_preset_leaves_a_users_multiproc_method(monkeypatch):
    for where in ("plan", "session"):
        monkeypatch.setattr(f"clef_prof.record.{where}.gpu_present", lambda: False)
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    args = cli.build_parser().parse_args(["record", "--out", "/tmp/x", "--preset", "vllm", "--", "vllm", "serve", "M"])
    pl = plan(config_from(args, ["vllm", "serve", "M"]), Nsys.assumed())
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in pl.env


def test_max_iterations_from_the_start_body_or_the_profiler_config():
    assert max_iterations('{"max_iterations": 8}', ["vllm", "serve", "M"], "vllm") == 8
    assert max_iterations(None, ["vllm", "serve", "M", "--profiler-config",
                                 '{"profiler": "cuda", "max_iterations": 5}'], "vllm") == 5
    assert max_iterations(None, ["vllm", "serve", "M"], "vllm") is None
    assert max_iterations('{"max_iterations": 8}', ["x"], "generic") is None


def test_sglang_preset_port_and_server_info(monkeypatch):
    cfg, pl = build(["--preset", "sglang"], ["python", "-m", "sglang.launch_server"], monkeypatch, gpu=True)
    assert cfg.url == "http://127.0.0.1:30000" and cfg.health == "http://127.0.0.1:30000/health"
    assert cfg.preset_obj.version == "/server_info"
    assert cfg.endpoint("start") == ("http://127.0.0.1:30000/start_profile", '{"activities": ["CUDA_PROFILER"]}')
    # a GPU, endpoints the preset cannot vouch for: launched under nsys session control, probed later
    assert pl.window == "nsys" and pl.probe and pl.main[1] == "launch"


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: set = set()

    def do_OPTIONS(self):
        self.send_response(405 if self.path in self.routes else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("routes,window", [({"/start_profile", "/stop_profile"}, "profiler-api"), (set(), "nsys")])
def test_window_auto_probes_the_server(monkeypatch, tmp_path, routes, window):
    handler = type("H", (_Handler,), {"routes": routes})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        cfg, pl = build(["--preset", "generic", "--url", url, "-q"], ["server"], monkeypatch, gpu=True)
        assert pl.probe and pl.window == "nsys"
        cap = Recording(cfg, pl)
        cap.probe()
        assert pl.window == window
        if window == "profiler-api":
            assert "--capture-range=cudaProfilerApi" in pl.start and pl.stop is None
        else:
            assert "--capture-range=cudaProfilerApi" not in pl.start and pl.stop
    finally:
        srv.shutdown()
        srv.server_close()
