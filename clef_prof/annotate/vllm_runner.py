"""Which vLLM model runner a server will run, for `inject --check` on specs whose batch targets
carry `runner = "vllm-v1"` / `"vllm-v2"`.

vLLM decides in `VllmConfig.use_v2_model_runner` (`vllm/config/vllm.py`): the environment
variable VLLM_USE_V2_MODEL_RUNNER (`bool(int(value))`) wins when set; otherwise the choice
depends on the model and its features (0.33: V2 unless a feature is unsupported or Triton is
missing; 0.22: V1 except for the models it lists as V2 defaults), which only the running
server knows. So this says which runner will run when the variable decides, and otherwise
that it cannot tell. It also reads Model Runner V2's `PoolingRunner.pool` source: where it
never calls the model's pooler (vLLM 0.22), stages below the pooler cannot run under V2.

Standard library only: it runs in the server's interpreter, without importing vLLM.
"""
from __future__ import annotations

import ast
import importlib.util
import os

ENV = "VLLM_USE_V2_MODEL_RUNNER"
RUNNERS = ("vllm-v1", "vllm-v2")
V2_POOL_MODULE = "vllm.v1.worker.gpu.pool.pooling_runner"


def _source(module: str) -> str | None:
    """The source of `module`, found below its top-level package without importing it."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(base, *rest) + ".py", encoding="utf-8") as fh:
                return fh.read()
        except OSError:
            continue
    return None


def calls_pooler(source: str, cls: str = "PoolingRunner", method: str = "pool") -> bool | None:
    """Whether `cls.method` in `source` calls something named `pooler` (None: no such method)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == method:
                    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "pooler"
                               for c in ast.walk(fn))
    return None


def decide(env: dict | None = None) -> tuple[str | None, str]:
    """(runner, why): "vllm-v1"/"vllm-v2" when VLLM_USE_V2_MODEL_RUNNER decides, else None."""
    env = os.environ if env is None else env
    value = env.get(ENV)
    if value is None:
        return None, (f"{ENV} is not set, so vLLM picks the runner from the model and its features "
                      "(VllmConfig.use_v2_model_runner); set it to 0 or 1 in the server's environment to decide")
    try:
        v2 = bool(int(value))
    except ValueError:
        return None, f"{ENV}={value!r} is not an integer (vLLM refuses it)"
    return ("vllm-v2" if v2 else "vllm-v1"), f"{ENV}={value}"


def report(runners: list[str], env: dict | None = None) -> dict:
    """What `inject --check` says about a spec's runner labels, in the checked interpreter:
    {"vllm": version or None, "runner": decided runner or None, "why": text, "v2_calls_pooler"}."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        vv = version("vllm")
    except PackageNotFoundError:
        vv = None
    runner, why = decide(env)
    if vv is None:
        runner, why = None, "vLLM is not installed in this interpreter"
    src = _source(V2_POOL_MODULE) if vv and "vllm-v2" in runners else None
    return {"vllm": vv, "runner": runner, "why": why,
            "v2_calls_pooler": calls_pooler(src) if src else None}


def lines(res: dict, batches: list[tuple[str, str, str]]) -> tuple[list[str], list[str], list[str]]:
    """(notes, warnings, never): one line each, for `batches` = [(where, target, runner)];
    `never` lists the batch targets (where) that will never be called."""
    notes, warnings, never = [], [], []
    runner, ver = res.get("runner"), res.get("vllm")
    if runner is None:
        warnings.append(f"cannot tell which vLLM model runner the server will run: {res.get('why')}")
    else:
        notes.append(f"vLLM {ver} will run Model Runner {runner[-2:].upper()} ({res.get('why')})")
        for where, target, r in batches:
            if r in RUNNERS and r != runner:
                never.append(where)
                notes.append(f"{where} {target} ({r}) will never be called under {res.get('why')}")
        if all(w in never for w, _t, r in batches):
            warnings.append(f"no batch target of the spec is called by Model Runner {runner[-2:].upper()}: "
                            "the capture will hold stage ranges and no batch range")
    if res.get("v2_calls_pooler") is False and runner != "vllm-v1":
        warnings.append(f"in vLLM {ver}, Model Runner V2's PoolingRunner.pool never calls the model's pooler: "
                        "stages below the pooler do not run under V2 (set VLLM_USE_V2_MODEL_RUNNER=0)")
    return notes, warnings, never
