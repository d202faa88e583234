"""The servers clef-prof knows how to profile: their profiling endpoints, start/stop bodies and
version URL (generic, vllm, sglang, none), and what vLLM's --profiler-config implies. Standard
library only."""
from __future__ import annotations

import json
from dataclasses import dataclass

WINDOWS = ("auto", "nsys", "profiler-api", "nvtx")
DEFAULT_NVTX_CAPTURE = "window@clef-prof"
VLLM_HINT = ("vLLM mounts /start_profile and /stop_profile only when profiling is configured: "
             "`--profiler-config '{\"profiler\": \"cuda\"}'` (vLLM >= 0.13), VLLM_TORCH_CUDA_PROFILE=1 (0.12), "
             "VLLM_TORCH_PROFILER_DIR=DIR (<= 0.11, the torch profiler: not under nsys)")


@dataclass(frozen=True)
class Preset:
    """How a kind of server is driven: health path, profiling endpoints and their bodies, the
    default URL, and what the server command and nsys need (where the user chose nothing)."""

    name: str
    health: str = "/health"
    start: str | None = "/start_profile"
    stop: str | None = "/stop_profile"
    start_body: str | None = None
    stop_body: str | None = None
    version: str | None = "/version"
    url: str = "http://127.0.0.1:8000"
    env: tuple[tuple[str, str], ...] = ()
    cuda_graph_trace: str = "graph"
    endpoints_sure: bool = False       # the endpoints exist (the preset mounts them): no probe
    id_field: str | None = None        # the body field the server takes its request id from (load: --request-id-field)


PRESETS = {
    "generic": Preset("generic"),
    # vLLM (checked in 0.22.1 and 0.33.0): the endpoints exist only with --profiler-config naming
    # a profiler (added when missing); 0.33 takes an optional body (max_iterations, ...); its
    # profiling guide: spawn workers, --trace-fork-before-exec=true --cuda-graph-trace=node
    "vllm": Preset("vllm", env=(("VLLM_WORKER_MULTIPROC_METHOD", "spawn"),), cuda_graph_trace="node",
                   endpoints_sure=True),
    # SGLang (checked in 0.5.23): port 30000, /server_info; the CUDA_PROFILER activity calls
    # cudaProfilerStart on the base GPU
    # its request id is the body's "rid" (kept from the HTTP body to the scheduler's batch; an
    # X-Request-Id header is not read): the load sends each request's id there too
    "sglang": Preset("sglang", start_body='{"activities": ["CUDA_PROFILER"]}', version="/server_info",
                     url="http://127.0.0.1:30000", id_field="rid"),
    "none": Preset("none", start=None, stop=None),
}
VLLM_PROFILER_FLAG = "--profiler-config"
VLLM_PROFILER_CONFIG = '{"profiler": "cuda"}'
PROFILERS = ("nsys", "torch")
# --profiler torch: where each kind of server is told the trace folder and to record every thread
TORCH_DIR_ENV = "CLEF_PROF_TORCH_PROFILER_DIR"        # the demo server (and any server that reads it)
TORCH_STACK_ENV = "CLEF_PROF_TORCH_WITH_STACK"        # "1": the same servers record with_stack=True


def torch_setup(preset: str, trace_dir: str, server: list[str],
                with_stack: bool = False) -> tuple[list[str], dict, str | None, list[str]]:
    """(server command, environment, start body or None, notes) that make a server of `preset`
    write PyTorch profiler traces into `trace_dir` between its start and stop calls, with Python
    stacks (`with_stack`: the trace's python_function events, analyze's per-stage functions) when
    asked. vLLM's own default is with_stack on; record states it either way, since it costs."""
    env = {TORCH_DIR_ENV: trace_dir, TORCH_STACK_ENV: "1" if with_stack else "0"}
    notes = []
    body = None
    if preset == "vllm":
        given, present = vllm_profiler_config(server)
        if present:
            try:
                cfg = json.loads(given) if given else None
            except ValueError:
                cfg = None
            if not (isinstance(cfg, dict) and cfg.get("profiler") == "torch"):
                from ..base.errors import ClefError
                raise ClefError(f"record --profiler torch: the server command already sets {VLLM_PROFILER_FLAG} to "
                                f"{given!r}; drop it (record adds the torch form) or make it "
                                '\'{"profiler": "torch", "torch_profiler_dir": DIR}\'')
            if cfg.get("torch_profiler_dir"):
                env[TORCH_DIR_ENV] = cfg["torch_profiler_dir"]
        else:
            conf = json.dumps({"profiler": "torch", "torch_profiler_dir": trace_dir,
                               "torch_profiler_with_stack": with_stack})
            server = server + [VLLM_PROFILER_FLAG, conf]
            notes.append(f"--preset vllm --profiler torch: added {VLLM_PROFILER_FLAG} '{conf}'")
    elif preset == "sglang":
        env.update(SGLANG_TORCH_PROFILER_DIR=trace_dir, SGLANG_TORCH_PROFILER_PROFILE_ALL_THREADS="1")
        body = json.dumps({"output_dir": trace_dir, "activities": ["CPU", "GPU"], "with_stack": with_stack})
        notes.append("--preset sglang --profiler torch: SGLANG_TORCH_PROFILER_DIR, "
                     "SGLANG_TORCH_PROFILER_PROFILE_ALL_THREADS=1 and the start body " + body)
    return server, env, body, notes


def vllm_profiler_config(server: list[str]) -> tuple[str | None, bool]:
    """(the value of --profiler-config in a vLLM command, whether the flag is there at all:
    `--profiler-config JSON`, `--profiler-config=JSON` or the dotted `--profiler-config.KEY V`)."""
    for i, a in enumerate(server):
        if a == VLLM_PROFILER_FLAG:
            return (server[i + 1] if i + 1 < len(server) else None), True
        if a.startswith(VLLM_PROFILER_FLAG + "="):
            return a.split("=", 1)[1], True
        if a.startswith(VLLM_PROFILER_FLAG + "."):
            return None, True
    return None, False


def max_iterations(start_body: str | None, server: list[str], preset: str) -> int | None:
    """Engine steps after which vLLM's profiler stops by itself (the start body's
    `max_iterations`, else the one in --profiler-config), or None."""
    if preset != "vllm":
        return None
    for text in (start_body, vllm_profiler_config(server)[0]):
        try:
            n = json.loads(text).get("max_iterations") if text else None
        except (ValueError, AttributeError):
            n = None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None
