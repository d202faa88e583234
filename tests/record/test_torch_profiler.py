"""`clef-prof record --profiler torch`: the server's own PyTorch profiler instead of nsys
(clef_prof.record.presets.torch_setup, plan._torch_plan): what each preset is told (the demo
server and any server: $CLEF_PROF_TORCH_PROFILER_DIR; vLLM: the --profiler-config torch form;
SGLang: its trace folder, all threads, and a start body), what is refused, and one real recording
on this machine, where the demo server's torch profiler cannot start (no torch): one line."""
from __future__ import annotations

import json
import os

import pytest

from clef_prof.cli import app as cli
from clef_prof.cli.record import config_from
from clef_prof.base.errors import ClefError
from clef_prof.record.plan import plan
from clicheck import run_main

SERVER = ["python3", "-m", "srv"]


def build(tmp_path, *argv, server=SERVER):
    args = cli.build_parser().parse_args(["record", "--profiler", "torch", "--out", str(tmp_path / "out"), *argv,
                                          "--", *server])
    cfg = config_from(args, list(server))
    return cfg, plan(cfg)


def test_generic_and_demo_server(tmp_path):
    cfg, pl = build(tmp_path)
    trace_dir = str(tmp_path / "out" / "capture.torch")
    assert pl.main == SERVER and pl.window == "profiler-api" and pl.torch_dir == trace_dir
    assert pl.env["CLEF_PROF_TORCH_PROFILER_DIR"] == trace_dir
    assert not any("nsys" in a for a in pl.main)
    assert cfg.endpoint("start") == ("http://127.0.0.1:8000/start_profile", None)
    # Python stacks only when asked (they cost), said to the server either way
    assert pl.env["CLEF_PROF_TORCH_WITH_STACK"] == "0"
    _, pl = build(tmp_path, "--torch-stack")
    assert pl.env["CLEF_PROF_TORCH_WITH_STACK"] == "1"


def test_vllm_gets_the_torch_profiler_config(tmp_path):
    _, pl = build(tmp_path, "--preset", "vllm", server=["vllm", "serve", "m"])
    i = pl.server.index("--profiler-config")
    conf = json.loads(pl.server[i + 1])
    assert conf == {"profiler": "torch", "torch_profiler_dir": str(tmp_path / "out" / "capture.torch"),
                    "torch_profiler_with_stack": False}
    _, pl = build(tmp_path, "--preset", "vllm", "--torch-stack", server=["vllm", "serve", "m"])
    assert json.loads(pl.server[pl.server.index("--profiler-config") + 1])["torch_profiler_with_stack"] is True
    # a torch form the user gave is kept, its folder is where the traces are looked for
    mine = '{"profiler": "torch", "torch_profiler_dir": "/elsewhere"}'
    _, pl = build(tmp_path, "--preset", "vllm", server=["vllm", "serve", "m", "--profiler-config", mine])
    assert pl.server.count("--profiler-config") == 1 and pl.env["CLEF_PROF_TORCH_PROFILER_DIR"] == "/elsewhere"


def test_vllm_cuda_profiler_config_refused(tmp_path):
    with pytest.raises(ClefError, match="already sets --profiler-config"):
        build(tmp_path, "--preset", "vllm", server=["vllm", "serve", "m", "--profiler-config", '{"profiler": "cuda"}'])


def test_sglang_folder_threads_and_body(tmp_path):
    cfg, pl = build(tmp_path, "--preset", "sglang", server=["python3", "-m", "sglang.launch_server"])
    d = str(tmp_path / "out" / "capture.torch")
    assert pl.env["SGLANG_TORCH_PROFILER_DIR"] == d and pl.env["SGLANG_TORCH_PROFILER_PROFILE_ALL_THREADS"] == "1"
    assert json.loads(cfg.endpoint("start")[1]) == {"output_dir": d, "activities": ["CPU", "GPU"], "with_stack": False}
    cfg, _ = build(tmp_path, "--preset", "sglang", "--torch-stack", server=["python3", "-m", "sglang.launch_server"])
    assert json.loads(cfg.endpoint("start")[1])["with_stack"] is True


@pytest.mark.parametrize("argv,why", [(("--window", "nsys"), "nsys window"),
                                       (("--no-endpoints",), "needs the server's")])
def test_refused(tmp_path, argv, why):
    with pytest.raises(ClefError, match=why):
        build(tmp_path, *argv)


def test_no_torch_in_the_server_is_one_line(tmp_path):
    """A real recording of the demo server on this CPU machine: its /start_profile cannot start a
    torch profiler without torch, and record says so in one line, leaving no process behind."""
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here: the profiler would start")
    except ImportError:
        pass
    out = tmp_path / "rec"
    p = run_main("record", "--profiler", "torch", "--warmup", "0.5", "--duration", "0.3", "--url",
                 "http://127.0.0.1:8779", "--out", out, "--quiet", "--", "python3", "-m", "clef_prof", "demo-server",
                 "--port", "8779", "--device", "cpu")
    assert p.returncode == 1
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("clef-prof: error")]
    assert len(err) == 1 and "torch" in err[0], p.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["profiler"] == "torch" and m["status"] == "failed"
    assert os.path.isdir(out / "capture.torch")
